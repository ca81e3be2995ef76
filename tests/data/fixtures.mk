### Fixtures made on a GPU host by tests/tools/mkfixtures.py (HF checkpoints, PEFT
### adapters, the trained demo model); see tests/data/README.md. Every file is listed
### (modelfiles/demo is also shipped whole by compiler/modelfile.mk; a file listed
### twice is copied once).
EXTRA_DIST += tests/tools/mkfixtures.py tests/data/README.md \
	modelfiles/demo/adapter/README.md \
	modelfiles/demo/adapter/adapter_config.json \
	modelfiles/demo/adapter/adapter_model.safetensors \
	modelfiles/demo/base/config.json \
	modelfiles/demo/base/generation_config.json \
	modelfiles/demo/base/model.safetensors \
	modelfiles/demo/base/tokenizer.json \
	modelfiles/demo/base/tokenizer_config.json \
	tests/data/hf/expected.json \
	tests/data/hf/tiny-llama-bf16/chat_template.jinja \
	tests/data/hf/tiny-llama-bf16/config.json \
	tests/data/hf/tiny-llama-bf16/generation_config.json \
	tests/data/hf/tiny-llama-bf16/model.safetensors \
	tests/data/hf/tiny-llama-bf16/tokenizer.json \
	tests/data/hf/tiny-llama-bf16/tokenizer_config.json \
	tests/data/hf/tiny-llama-vocab.out \
	tests/data/hf/tiny-llama/config.json \
	tests/data/hf/tiny-llama/generation_config.json \
	tests/data/hf/tiny-llama/model-00001-of-00002.safetensors \
	tests/data/hf/tiny-llama/model-00002-of-00002.safetensors \
	tests/data/hf/tiny-llama/model.safetensors.index.json \
	tests/data/hf/tiny-llama/tokenizer.json \
	tests/data/hf/tiny-llama/tokenizer_config.json \
	tests/data/peft/expected.json \
	tests/data/peft/tiny-lora-f16/README.md \
	tests/data/peft/tiny-lora-f16/adapter_config.json \
	tests/data/peft/tiny-lora-f16/adapter_model.safetensors \
	tests/data/peft/tiny-lora/README.md \
	tests/data/peft/tiny-lora/adapter_config.json \
	tests/data/peft/tiny-lora/adapter_model.safetensors \
	modelfiles/demo/expected.json
