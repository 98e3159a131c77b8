"""The work a synthetic GPU does, as data: kernel names, typical durations, collectives.

Names are the demangled signatures real H100 traces of vLLM decode and Megatron/FSDP training
show; durations are means in nanoseconds (each launch draws around them). NCCL kernels use the
NCCL ≥ 2.19 naming (``ncclDevKernel_<Coll>[_<RedOp>_<type>]_<ALGO>_<PROTO>``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kernel:
    name: str
    mean_ns: int
    op: str
    """The ``cpu_op`` that launches it."""


_GEMM = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
         "execute_segment_k_off_kernel__5x_cublas")
_GEMV = (
    "void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, float, 128, 16, 4, 4, "
    "false, false, cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<__nv_bfloat16 const>, "
    "cublasGemvTensorStridedBatched<__nv_bfloat16 const>, "
    "cublasGemvTensorStridedBatched<__nv_bfloat16>, float> >(cublasGemvParamsEx<int, "
    "cublasGemvTensorStridedBatched<__nv_bfloat16 const>, "
    "cublasGemvTensorStridedBatched<__nv_bfloat16 const>, "
    "cublasGemvTensorStridedBatched<__nv_bfloat16>, float>, float, float)"
)
_FLASH_FWD = (
    "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
    "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, "
    "true, false, false, false, true, false, false>(Flash_fwd_params)"
)
_FLASH_BWD = (
    "void flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, "
    "128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, "
    "cutlass::bfloat16_t> >, false, true, false, false, false, false, false>(Flash_bwd_params)"
)
_SPLITKV = (
    "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, "
    "false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, "
    "false, false, false, false, true, true, false, false>(Flash_fwd_params)"
)
_RMSNORM = (
    "void vllm::rms_norm_kernel<c10::BFloat16>(c10::BFloat16*, c10::BFloat16 const*, "
    "c10::BFloat16 const*, float, int, int)"
)
_CACHE = (
    "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, "
    "(vllm::Fp8KVCacheDataType)0>(__nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, "
    "__nv_bfloat16*, long const*, int, int, int, int, int, int, float const*, float const*)"
)
_SAMPLE = (
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
    "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)"
)
_ADD = (
    "void at::native::vectorized_elementwise_kernel<4, "
    "at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul> >(int, "
    "at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)"
)
_SOFTMAX = (
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
    "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)"
)
_ADAM = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
    "namespace)::TensorListMetadata<4>, at::native::(anonymous "
    "namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, double*, double, "
    "double, double, double, double, double, bool, bool>(at::native::(anonymous "
    "namespace)::TensorListMetadata<4>, at::native::(anonymous "
    "namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, double*, double, "
    "double, double, double, double, double, bool, bool)"
)
_REDUCE = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
    "at::native::MeanOps<float, float, float, float>, unsigned int, float, 4, 4> "
    ">(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, "
    "float, 4, 4>)"
)
_CAST = (
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::"
    "TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::"
    "operator()() const::{lambda(float)#1}, std::array<char*, 2ul>, 4, TrivialOffsetCalculator<"
    "1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::"
    "LoadWithCast<1>, at::native::memory::StoreWithCast<1> >(int, at::native::"
    "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::"
    "{lambda()#12}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>, "
    "TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::"
    "native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1>)"
)

DECODE: tuple[Kernel, ...] = (
    Kernel(_RMSNORM, 30_000, "vllm::rms_norm"),
    Kernel(_GEMV, 430_000, "aten::mm"),
    Kernel(_CACHE, 35_000, "vllm::reshape_and_cache_flash"),
    Kernel(_SPLITKV, 640_000, "vllm::unified_attention"),
    Kernel(_GEMV, 800_000, "aten::mm"),
    Kernel(_SAMPLE, 60_000, "aten::softmax"),
)
"""One decode step's kernels (a CUDA-graph replay); ``--decode-kernels-per-step`` takes a prefix
and cycles it when more are asked for."""

PREFILL: tuple[Kernel, ...] = (
    Kernel(_RMSNORM, 60_000, "vllm::rms_norm"),
    Kernel(_GEMM, 900_000, "aten::mm"),
    Kernel(_FLASH_FWD, 700_000, "vllm::unified_attention"),
    Kernel(_GEMM, 1_400_000, "aten::mm"),
)
FORWARD: tuple[Kernel, ...] = (
    Kernel(_GEMM, 550_000, "aten::mm"),
    Kernel(_FLASH_FWD, 400_000, "aten::_flash_attention_forward"),
    Kernel(_GEMM, 800_000, "aten::mm"),
    Kernel(_ADD, 60_000, "aten::add"),
)
LOGPROB: tuple[Kernel, ...] = (Kernel(_SOFTMAX, 220_000, "aten::_log_softmax"),)
BACKWARD: tuple[Kernel, ...] = (
    Kernel(_GEMM, 1_000_000, "aten::mm"),
    Kernel(_FLASH_BWD, 850_000, "aten::_flash_attention_backward"),
    Kernel(_GEMM, 1_300_000, "aten::mm"),
    Kernel(_ADD, 80_000, "aten::add"),
)
OPTIMIZER: tuple[Kernel, ...] = (
    Kernel(_ADAM, 900_000, "aten::_fused_adam_"),
    Kernel(_ADAM, 900_000, "aten::_fused_adam_"),
)
ADVANTAGE: tuple[Kernel, ...] = (
    Kernel(_REDUCE, 30_000, "aten::mean"),
    Kernel(_REDUCE, 30_000, "aten::std"),
    Kernel(_ADD, 15_000, "aten::sub"),
)
SYNC_PACK: tuple[Kernel, ...] = (Kernel(_CAST, 400_000, "aten::copy_"),)

REWARD_HOST_OPS: tuple[tuple[str, int], ...] = (
    ("aten::to", 180_000), ("aten::eq", 40_000), ("aten::sum", 60_000), ("aten::item", 25_000),
)
"""CPU-only work of a rule reward (no kernels): host op name and mean duration."""


@dataclass(frozen=True)
class Coll:
    """A collective: PyTorch's ``Collective name``, its NCCL kernel and message shape."""

    name: str
    kernel: str
    nelems: int
    """Elements of the input per rank (bf16); all_gather outputs ×group size, reduce_scatter ÷."""
    bw_gbps: float = 150.0
    latency_ns: int = 12_000

    def shape(self, group_size: int) -> tuple[int, int]:
        """(In msg nelems, Out msg nelems) as ``record_param_comms`` states them."""
        if self.name == "_allgather_base":
            return self.nelems, self.nelems * group_size
        if self.name == "_reduce_scatter_base":
            return self.nelems, self.nelems // group_size
        return self.nelems, self.nelems


_ARGS = "(ncclDevKernelArgsStorage<4096ul>)"
NCCL_KERNELS: dict[str, str] = {
    "allreduce": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL" + _ARGS,
    "_allgather_base": "ncclDevKernel_AllGather_RING_LL" + _ARGS,
    "_reduce_scatter_base": "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL" + _ARGS,
    "broadcast": "ncclDevKernel_Broadcast_RING_LL" + _ARGS,
    "send": "ncclDevKernel_SendRecv" + _ARGS,
    "recv": "ncclDevKernel_SendRecv" + _ARGS,
    "all_to_all": "ncclDevKernel_SendRecv" + _ARGS,
}

DTYPE = "BFloat16"
DTYPE_BYTES = 2

MEMCPY_HTOD = "Memcpy HtoD (Pinned -> Device)"
MEMCPY_DTOD = "Memcpy DtoD (Device -> Device)"
MEMSET = "Memset (Device)"
