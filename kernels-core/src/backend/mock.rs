//! A backend in host memory, for GPU-free tests of everything written above the
//! [`Backend`] trait: the runtime's resolution and memo, the tuner's candidate loop,
//! in-place safety and final run, capture refusal, and the ops.
//!
//! Buffers are host allocations whose addresses the mock's copies and zeroing write
//! through. A kernel does nothing to memory; a launch advances the stream's simulated
//! clock by the variant's define `MOCK_US` (microseconds, default 1) and is logged, so
//! event timing measures exactly that and a search picks the variant with the
//! smallest `MOCK_US`. A variant defining `MOCK_FAIL` fails to compile; one defining
//! `MOCK_FILL=<byte>` writes that byte over the buffer its first two arguments name
//! (address, bytes), so an output check can tell a right variant from a wrong one.

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use crate::{
    Backend, DeviceInfo, Error, Image, ImageKind, KernelArgs, KernelSource, LaunchDims, LoadedKernel, Result,
    Variant,
};

/// The mock backend.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Mock;

/// A mock device: a nominal H200's limits.
#[derive(Clone, Debug)]
pub struct MockDevice {
    info: Arc<DeviceInfo>,
}

impl MockDevice {
    /// A device with `info`'s limits.
    pub fn new(info: DeviceInfo) -> MockDevice {
        MockDevice { info: Arc::new(info) }
    }
}

/// A mock stream: whether it captures a graph, its simulated clock and a log of what
/// was enqueued (`launch <variant>`, `copy`, `zero`, `sync`).
#[derive(Debug, Default)]
pub struct MockStream {
    /// Set to make the stream report that it is capturing a graph.
    pub capturing: Cell<bool>,
    clock_us: Cell<f64>,
    /// What was enqueued, in order.
    pub log: RefCell<Vec<String>>,
}

impl MockStream {
    /// Launches logged so far, by variant.
    pub fn launches(&self) -> Vec<String> {
        self.log
            .borrow()
            .iter()
            .filter_map(|l| l.strip_prefix("launch ").map(str::to_string))
            .collect()
    }
}

/// A mock kernel: its names, simulated duration and the byte it writes, if any.
#[derive(Debug)]
pub struct MockKernel {
    name: String,
    variant: String,
    us: f64,
    fill: Option<u8>,
    info: Arc<DeviceInfo>,
}

impl LoadedKernel for MockKernel {
    fn name(&self) -> &str {
        &self.name
    }
    fn variant(&self) -> &str {
        &self.variant
    }
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
}

/// The mock compiler.
#[derive(Clone, Copy, Debug, Default)]
pub struct MockCompiler;

/// A host allocation standing in for device memory.
#[derive(Debug)]
pub struct MockBuffer(Box<[u8]>);

impl Backend for Mock {
    const NAME: &'static str = "mock";
    const GRAPH_TIMING: bool = false;
    const PROGRAMMATIC_LAUNCH: bool = false;

    type Device = MockDevice;
    type Stream = MockStream;
    type Kernel = MockKernel;
    type Compiler = MockCompiler;
    type Buffer = MockBuffer;
    type Event = Cell<f64>;

    fn open(ordinal: usize) -> Result<MockDevice> {
        let mut info = DeviceInfo::nominal(tuned::Target::Sm90).ok_or(Error::NoDriver)?;
        info.ordinal = ordinal;
        Ok(MockDevice::new(info))
    }

    fn info(device: &MockDevice) -> &DeviceInfo {
        &device.info
    }

    fn compiler() -> Result<MockCompiler> {
        Ok(MockCompiler)
    }

    fn compiler_id(_: &MockCompiler) -> String {
        "mock 1.0".into()
    }

    fn codegen_env(_: &MockCompiler) -> &[(String, String)] {
        &[]
    }

    fn compile_options(_: &MockCompiler, variant: &Variant, arch: &str) -> Vec<String> {
        variant.nvrtc_options(arch, &[])
    }

    fn compile(_: &MockCompiler, source: &KernelSource, variant: &Variant, arch: &str) -> Result<Image> {
        if variant.defines().iter().any(|(n, _)| n == "MOCK_FAIL") {
            return Err(Error::Compile {
                kernel: source.name.to_string(),
                variant: variant.to_string(),
                arch: arch.to_string(),
                log: "MOCK_FAIL".into(),
            });
        }
        Ok(Image {
            kind: ImageKind::Cubin,
            bytes: variant.to_string().into_bytes(),
        })
    }

    fn loads(kind: ImageKind) -> bool {
        kind == ImageKind::Cubin
    }

    fn load(
        device: &MockDevice,
        _: &Image,
        source: &KernelSource,
        variant: &Variant,
        _: bool,
    ) -> Result<MockKernel> {
        let us = variant
            .defines()
            .iter()
            .find(|(n, _)| n == "MOCK_US")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(1.0);
        let fill = variant
            .defines()
            .iter()
            .find(|(n, _)| n == "MOCK_FILL")
            .and_then(|(_, v)| v.parse().ok());
        Ok(MockKernel {
            name: source.name.to_string(),
            variant: variant.to_string(),
            us,
            fill,
            info: device.info.clone(),
        })
    }

    unsafe fn launch(
        kernel: &MockKernel,
        stream: &MockStream,
        dims: LaunchDims,
        args: &KernelArgs,
    ) -> Result<()> {
        if args.overflow {
            return Err(Error::invalid("args", "too many kernel arguments"));
        }
        // Tensor maps are checked as the CUDA launch checks them before encoding.
        for (_, map) in args.tensor_maps() {
            map.check("args")?;
        }
        dims.validate(&kernel.info)?;
        if let (Some(fill), [dst, bytes, ..]) = (kernel.fill, args.slots()) {
            // SAFETY: the caller guarantees the arguments' addresses are valid (host
            // memory here) for what the kernel writes: `bytes` at `dst`.
            unsafe { std::ptr::write_bytes(*dst as *mut u8, fill, *bytes as usize) };
        }
        stream.clock_us.set(stream.clock_us.get() + kernel.us);
        stream.log.borrow_mut().push(format!("launch {}", kernel.variant));
        Ok(())
    }

    fn is_capturing(stream: &MockStream) -> Result<bool> {
        Ok(stream.capturing.get())
    }

    fn synchronize(stream: &MockStream) -> Result<()> {
        stream.log.borrow_mut().push("sync".into());
        Ok(())
    }

    fn alloc(_: &MockStream, bytes: usize) -> Result<MockBuffer> {
        Ok(MockBuffer(vec![0xa5; bytes.max(1)].into_boxed_slice()))
    }

    fn upload(_: &MockStream, host: &[u8]) -> Result<MockBuffer> {
        let mut b = host.to_vec();
        if b.is_empty() {
            b.push(0);
        }
        Ok(MockBuffer(b.into_boxed_slice()))
    }

    fn address(buffer: &MockBuffer) -> u64 {
        buffer.0.as_ptr() as u64
    }

    unsafe fn copy(stream: &MockStream, dst: u64, src: u64, bytes: usize) -> Result<()> {
        stream.log.borrow_mut().push("copy".into());
        // SAFETY: the caller guarantees both ranges are valid (host memory here).
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, bytes) };
        Ok(())
    }

    unsafe fn zero(stream: &MockStream, dst: u64, bytes: usize) -> Result<()> {
        stream.log.borrow_mut().push("zero".into());
        // SAFETY: as for `copy`.
        unsafe { std::ptr::write_bytes(dst as *mut u8, 0, bytes) };
        Ok(())
    }

    unsafe fn read_back(stream: &MockStream, src: u64, dst: &mut [u8]) -> Result<()> {
        stream.log.borrow_mut().push("read".into());
        // SAFETY: mock device memory is host memory, valid per the caller's contract.
        unsafe { std::ptr::copy(src as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    fn event(_: &MockStream) -> Result<Cell<f64>> {
        Ok(Cell::new(f64::NAN))
    }

    fn record(event: &Cell<f64>, stream: &MockStream) -> Result<()> {
        event.set(stream.clock_us.get());
        Ok(())
    }

    fn elapsed_ms(start: &Cell<f64>, end: &Cell<f64>) -> Result<f32> {
        Ok(((end.get() - start.get()) / 1000.0) as f32)
    }
}
