### GGUF reader/writer (common/gguf.*), mfc inspect, and their tests
