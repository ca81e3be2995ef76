### mfc-serve: the HTTP server over the engine (runtime/serve*)
