### RUN steps in a bubblewrap sandbox (compiler/sandbox*)
