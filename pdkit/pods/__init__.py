"""Programs that run inside the kit's pods: weights import and node-local staging, the compile-cache
save/restore, the bench output compactor.

Standard library, boto3 and huggingface_hub only, and nothing else from pdkit: the images copy these
files as they are (containers/sglang-efa/Dockerfile) and the renderers name their entry points.
"""
