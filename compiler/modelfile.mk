### Modelfile front end (compiler/modelfile.*), mfc check/fmt, and their tests
