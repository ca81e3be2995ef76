### Engine: model loader, paged KV, scheduler, CPU backend (runtime/model*, kv*, sched*, cpu*)
