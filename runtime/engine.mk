### Paged KV manager, scheduler, engine loop (runtime/kv*, sched*, engine*)
