# NCCL variables of trial 11 of study parallel (source before ngptune train).
# Site variables (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, ...) are not included: keep your own.
export NCCL_NVLS_ENABLE=0
