"""IPython glue: ``%load_ext nbgpu``, ``%gpumon`` and ``%%gpumon`` over the public API."""
