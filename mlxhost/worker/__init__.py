"""The worker process: one model loaded with MLX, served over a private Unix socket to the parent.
The only package that imports MLX or mlx-lm."""
