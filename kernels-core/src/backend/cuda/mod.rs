//! The CUDA backend (feature `cuda`): cudarc's driver API and NVRTC, loaded at run time
//! (so it builds where no CUDA is installed).
//!
//! Layers, bottom up: `ffi` (private) is the only unsafe FFI edge; [`CudaDevice`],
//! [`CudaKernel`] and [`RawStream`] are safe types over it; [`Cuda`] implements
//! [`crate::Backend`] with them. CUDA-only capabilities: graph timing ([`GraphTimer`],
//! [`time_graph_runs`]), programmatic dependent launch, and launches with cudarc
//! buffers ([`CudaKernel::builder`]).

use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaSlice, CudaStream, DevicePtr};
use cudarc::nvrtc::Ptx;

mod device;
pub(crate) mod ffi;
mod graph;
mod kernel;

pub use device::CudaDevice;
pub use ffi::encode_tensor_map;
pub use graph::{time_graph_runs, GraphTimer};
pub use kernel::{CudaKernel, Launch, RawStream};

use ffi::{driver_error, guard};

use crate::{
    Backend, Compiler, DeviceInfo, Image, ImageKind, KernelArgs, KernelSource, LaunchDims, Result, Timing,
    TimingOptions, Variant,
};

/// The CUDA backend: cudarc's driver API and NVRTC.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Cuda;

impl Backend for Cuda {
    const NAME: &'static str = "CUDA";
    const GRAPH_TIMING: bool = true;
    const PROGRAMMATIC_LAUNCH: bool = true;

    type Device = CudaDevice;
    type Stream = Arc<CudaStream>;
    type Kernel = CudaKernel;
    type Compiler = Compiler;
    type Buffer = CudaSlice<u8>;
    type Event = CudaEvent;

    fn open(ordinal: usize) -> Result<CudaDevice> {
        CudaDevice::open(ordinal)
    }

    fn info(device: &CudaDevice) -> &DeviceInfo {
        device.info()
    }

    fn compiler() -> Result<Compiler> {
        Compiler::detect()
    }

    fn compiler_id(compiler: &Compiler) -> String {
        compiler.id()
    }

    fn codegen_env(compiler: &Compiler) -> &[(String, String)] {
        compiler.codegen_env()
    }

    fn compile_options(compiler: &Compiler, variant: &Variant, arch: &str) -> Vec<String> {
        compiler.options(variant, arch)
    }

    fn compile(compiler: &Compiler, source: &KernelSource, variant: &Variant, arch: &str) -> Result<Image> {
        compiler.compile(source, variant, arch)
    }

    fn loads(kind: ImageKind) -> bool {
        matches!(kind, ImageKind::Cubin | ImageKind::Ptx)
    }

    fn load(
        device: &CudaDevice,
        image: &Image,
        source: &KernelSource,
        variant: &Variant,
        pdl: bool,
    ) -> Result<CudaKernel> {
        let ctx = device.context();
        let mut bytes = image.bytes.clone();
        if image.kind == ImageKind::Ptx && bytes.last() != Some(&0) {
            bytes.push(0);
        }
        let module = guard("cuModuleLoadData", || {
            ctx.load_module(Ptx::from_binary(bytes))
                .map_err(|e| driver_error("cuModuleLoadData", e))
        })?;
        CudaKernel::from_module(
            &module,
            ctx.clone(),
            variant.entry(),
            source.name,
            variant.to_string(),
            Arc::new(device.info().clone()),
            pdl,
        )
    }

    unsafe fn launch(
        kernel: &CudaKernel,
        stream: &Arc<CudaStream>,
        dims: LaunchDims,
        args: &KernelArgs,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { kernel.launch_raw(RawStream::of(stream), dims, args) }
    }

    fn is_capturing(stream: &Arc<CudaStream>) -> Result<bool> {
        ffi::is_capturing(stream.cu_stream())
    }

    fn synchronize(stream: &Arc<CudaStream>) -> Result<()> {
        stream
            .synchronize()
            .map_err(|e| driver_error("cuStreamSynchronize", e))
    }

    fn alloc(stream: &Arc<CudaStream>, bytes: usize) -> Result<CudaSlice<u8>> {
        // SAFETY: u8 has no invalid bit patterns; callers fill the buffer before reading.
        unsafe { stream.alloc::<u8>(bytes.max(1)) }.map_err(|e| driver_error("cuMemAlloc", e))
    }

    fn upload(stream: &Arc<CudaStream>, host: &[u8]) -> Result<CudaSlice<u8>> {
        stream
            .clone_htod(host)
            .map_err(|e| driver_error("cuMemcpyHtoD", e))
    }

    fn address(buffer: &CudaSlice<u8>) -> u64 {
        let stream = buffer.stream().clone();
        let (ptr, _record) = buffer.device_ptr(&stream);
        ptr
    }

    unsafe fn copy(stream: &Arc<CudaStream>, dst: u64, src: u64, bytes: usize) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { ffi::copy_dtod(dst, src, bytes, stream.cu_stream()) }
    }

    unsafe fn zero(stream: &Arc<CudaStream>, dst: u64, bytes: usize) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { ffi::zero(dst, bytes, stream.cu_stream()) }
    }

    unsafe fn read_back(stream: &Arc<CudaStream>, src: u64, dst: &mut [u8]) -> Result<()> {
        // SAFETY: `src` is valid for dst.len() bytes by the caller's contract, and the
        // copy completes before the synchronize returns.
        unsafe { cudarc::driver::result::memcpy_dtoh_async(dst, src, stream.cu_stream()) }
            .map_err(|e| driver_error("cuMemcpyDtoHAsync", e))?;
        stream
            .synchronize()
            .map_err(|e| driver_error("cuStreamSynchronize", e))
    }

    fn event(stream: &Arc<CudaStream>) -> Result<CudaEvent> {
        stream
            .context()
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| driver_error("cuEventCreate", e))
    }

    fn record(event: &CudaEvent, stream: &Arc<CudaStream>) -> Result<()> {
        event.record(stream).map_err(|e| driver_error("cuEventRecord", e))
    }

    fn elapsed_ms(start: &CudaEvent, end: &CudaEvent) -> Result<f32> {
        end.synchronize()
            .map_err(|e| driver_error("cuEventSynchronize", e))?;
        start
            .elapsed_ms(end)
            .map_err(|e| driver_error("cuEventElapsedTime", e))
    }

    fn time_graph_runs(
        stream: &Arc<CudaStream>,
        opts: &TimingOptions,
        launches: usize,
        copies: usize,
        launch: &mut dyn FnMut(usize) -> Result<()>,
    ) -> Result<Timing> {
        graph::time_graph_runs(stream, opts, launches, copies, launch)
    }
}
