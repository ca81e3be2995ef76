### libmfc_runtime and mfc-serve (grows with the runtime issues)
