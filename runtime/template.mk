### Chat templates (runtime/template*) and the sampler (runtime/sampler*)
