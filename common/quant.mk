### Quantization codecs (common/quant*), their tests and benchmarks
