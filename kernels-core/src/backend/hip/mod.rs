//! The AMD backend (feature `rocm`): the HIP runtime linked through hip-sys, hipRTC
//! loaded at run time. See `docs/amd.md`.
//!
//! Layers, bottom up: `ffi` (private) is the only unsafe code: HIP runtime calls, the
//! hipRTC library, the handle types. Above it, safe types: [`HipDevice`] and
//! [`HipDeviceInfo`] (discovery, `gcnArchName` and the gfx target, CUs, limits),
//! [`HipStream`]s and [`HipBuffer`]s, [`HipCompiler`] (hipRTC, code objects),
//! [`HipKernel`] (`hipModuleLaunchKernel`) and [`HipEvent`]. [`Hip`] implements
//! [`crate::Backend`] with them; it has neither graph timing nor programmatic
//! dependent launch. With no AMD GPU every entry point is
//! [`crate::Error::NoHipDevice`].

mod device;
mod ffi;
mod kernel;
mod rtc;
mod timing;

pub use device::{DeviceCopy, HipBuffer, HipDevice, HipDeviceInfo, HipStream};
pub use kernel::HipKernel;
pub use rtc::HipCompiler;
pub use timing::HipEvent;

use crate::{Backend, DeviceInfo, Image, ImageKind, KernelArgs, KernelSource, LaunchDims, Result, Variant};

/// The AMD backend: the HIP runtime and hipRTC.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Hip;

impl Backend for Hip {
    const NAME: &'static str = "HIP";
    const GRAPH_TIMING: bool = false;
    const PROGRAMMATIC_LAUNCH: bool = false;

    type Device = HipDevice;
    type Stream = HipStream;
    type Kernel = HipKernel;
    type Compiler = HipCompiler;
    type Buffer = HipBuffer<u8>;
    type Event = HipEvent;

    fn open(ordinal: usize) -> Result<HipDevice> {
        HipDevice::open(ordinal)
    }

    fn info(device: &HipDevice) -> &DeviceInfo {
        device.limits()
    }

    fn compiler() -> Result<HipCompiler> {
        HipCompiler::detect()
    }

    fn compiler_id(compiler: &HipCompiler) -> String {
        compiler.id()
    }

    fn codegen_env(_: &HipCompiler) -> &[(String, String)] {
        // No environment variable changes hipRTC's code generation here.
        &[]
    }

    fn compile_options(compiler: &HipCompiler, variant: &Variant, arch: &str) -> Vec<String> {
        compiler.options(variant, arch)
    }

    fn compile(
        compiler: &HipCompiler,
        source: &KernelSource,
        variant: &Variant,
        arch: &str,
    ) -> Result<Image> {
        compiler.compile(source, variant, arch)
    }

    fn loads(kind: ImageKind) -> bool {
        kind == ImageKind::CodeObject
    }

    fn load(
        device: &HipDevice,
        image: &Image,
        source: &KernelSource,
        variant: &Variant,
        _pdl: bool,
    ) -> Result<HipKernel> {
        HipKernel::load(device, image, variant.entry(), source.name, variant.to_string())
    }

    unsafe fn launch(
        kernel: &HipKernel,
        stream: &HipStream,
        dims: LaunchDims,
        args: &KernelArgs,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { kernel.launch(stream, dims, args) }
    }

    fn is_capturing(stream: &HipStream) -> Result<bool> {
        stream.is_capturing()
    }

    fn synchronize(stream: &HipStream) -> Result<()> {
        stream.synchronize()
    }

    fn alloc(stream: &HipStream, bytes: usize) -> Result<HipBuffer<u8>> {
        HipBuffer::alloc_on(stream.ordinal(), bytes)
    }

    fn upload(stream: &HipStream, host: &[u8]) -> Result<HipBuffer<u8>> {
        HipBuffer::upload_on(stream.ordinal(), host)
    }

    fn address(buffer: &HipBuffer<u8>) -> u64 {
        buffer.device_ptr()
    }

    unsafe fn copy(stream: &HipStream, dst: u64, src: u64, bytes: usize) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { ffi::copy_dtod(dst, src, bytes, stream.handle()) }
    }

    unsafe fn zero(stream: &HipStream, dst: u64, bytes: usize) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { ffi::memset_zero(dst, bytes, stream.handle()) }
    }

    unsafe fn read_back(stream: &HipStream, src: u64, dst: &mut [u8]) -> Result<()> {
        Hip::synchronize(stream)?;
        ffi::set_device(stream.ordinal())?;
        // SAFETY: `src` is valid for dst.len() bytes by the caller's contract; the copy
        // is synchronous.
        unsafe { ffi::copy_to_host(dst, src) }
    }

    fn event(stream: &HipStream) -> Result<HipEvent> {
        HipEvent::on(stream.ordinal())
    }

    fn record(event: &HipEvent, stream: &HipStream) -> Result<()> {
        event.record(stream)
    }

    fn elapsed_ms(start: &HipEvent, end: &HipEvent) -> Result<f32> {
        end.synchronize()?;
        start.elapsed_ms(end)
    }
}
