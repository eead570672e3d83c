# NCCL variables of trial 2 of study nccl (source before ngptune train).
# Site variables (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, ...) are not included: keep your own.
export NCCL_ALGO=Ring
export NCCL_BUFFSIZE=1048576
export NCCL_MAX_NCHANNELS=15
export NCCL_MIN_NCHANNELS=2
export NCCL_NTHREADS=64
export NCCL_NVLS_ENABLE=0
export NCCL_PROTO=LL
