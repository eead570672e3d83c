# NCCL variables of trial 0 of study "capture" (source before ngptune train).
# Site variables (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, ...) are not included: keep your own; NCCL_NVLS_ENABLE=0 is set in every trial (NVLink SHARP multicast stays off).
# NCCL was inactive in this sweep (gloo backend): no NCCL variable was tuned.
export NCCL_NVLS_ENABLE=0
