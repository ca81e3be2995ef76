### The CUDA backend (runtime/cuda*; kernels in kernels/)
