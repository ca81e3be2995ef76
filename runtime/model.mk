### Model loader, CPU backend, runtime LoRA (runtime/model*, backend*, cpu*, lora*)
