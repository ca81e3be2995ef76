### Fixtures made on a GPU host by tests/tools/mkfixtures.py (HF checkpoints, PEFT adapters)
