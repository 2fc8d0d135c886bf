"""Platform layer: the CUDA runtime binding and the fill/check kernels the backends use."""
