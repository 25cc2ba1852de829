//! Loaded HIP kernels: one variant's function in a module loaded on one device,
//! launched with `hipModuleLaunchKernel`.

use std::ffi::c_void;
use std::fmt;

use super::ffi::{self, FunctionHandle, ModuleHandle};
use super::{HipDevice, HipStream};
use crate::{DeviceInfo, Error, Image, ImageKind, KernelArgs, LaunchDims, Result, MAX_KERNEL_ARGS};

/// A loaded kernel: one variant's function in a module loaded on one device. Held in
/// the runtime's memo; launching it compiles and loads nothing.
pub struct HipKernel {
    kernel: String,
    variant: String,
    function: FunctionHandle,
    // The function is valid only while its module is loaded.
    _module: ModuleHandle,
    limits: DeviceInfo,
}

impl fmt::Debug for HipKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HipKernel")
            .field("kernel", &self.kernel)
            .field("variant", &self.variant)
            .finish()
    }
}

impl HipKernel {
    /// Loads `image` on `device` and gets `entry` from it.
    pub(crate) fn load(
        device: &HipDevice,
        image: &Image,
        entry: &str,
        kernel: &str,
        variant: String,
    ) -> Result<HipKernel> {
        if image.kind != ImageKind::CodeObject {
            return Err(Error::invalid(
                "image",
                format!("is a {} image; HIP loads code objects (hsaco)", image.kind.name()),
            ));
        }
        device.select()?;
        let module = ffi::module_load(&image.bytes)?;
        let function = ffi::module_function(&module, entry).map_err(|e| Error::Hip {
            call: "hipModuleGetFunction",
            message: format!("kernel `{kernel}` variant [{variant}] has no entry `{entry}`: {e}"),
        })?;
        Ok(HipKernel {
            kernel: kernel.to_string(),
            variant,
            function,
            _module: module,
            limits: device.info().launch_limits(),
        })
    }

    /// The kernel family's name.
    pub fn name(&self) -> &str {
        &self.kernel
    }

    /// The variant, as [`crate::Variant`] displays it.
    pub fn variant(&self) -> &str {
        &self.variant
    }

    /// The device it is loaded on, as launch plans and limit checks see it
    /// ([`super::HipDeviceInfo::launch_limits`]).
    pub fn info(&self) -> &DeviceInfo {
        &self.limits
    }

    /// Checks a launch without making it: `dims` against the device (grid, block, and
    /// dynamic LDS at most the workgroup's LDS, 64 KiB on gfx90a and gfx942: more is an
    /// invalid `smem_bytes`) and the argument count.
    ///
    /// On AMD, module kernels need no opt-in for dynamic LDS up to that limit;
    /// `hipFuncSetAttribute` takes a host-side kernel symbol, not a module function,
    /// so it is not called.
    pub fn check_launch(&self, dims: &LaunchDims, args: &KernelArgs) -> Result<()> {
        if args.overflow {
            return Err(Error::invalid(
                "args",
                format!("more than {MAX_KERNEL_ARGS} kernel arguments"),
            ));
        }
        if args.has_tensor_maps() {
            return Err(Error::invalid(
                "args",
                "tensor maps (TMA) are NVIDIA-only; AMD kernels take none",
            ));
        }
        dims.validate(&self.limits)
    }

    /// Launches on `stream` with raw device pointers and scalars (the same packed
    /// [`KernelArgs`] the CUDA path uses), after [`HipKernel::check_launch`].
    ///
    /// # Safety
    /// `args` must match the kernel's parameters in order and type, every pointer in
    /// it must be valid for what the kernel reads and writes, and `stream` must belong
    /// to the kernel's device.
    pub unsafe fn launch(&self, stream: &HipStream, dims: LaunchDims, args: &KernelArgs) -> Result<()> {
        self.check_launch(&dims, args)?;
        if stream.ordinal() != self.limits.ordinal {
            return Err(Error::invalid(
                "stream",
                format!(
                    "belongs to device {}; the kernel is loaded on device {}",
                    stream.ordinal(),
                    self.limits.ordinal
                ),
            ));
        }
        ffi::set_device(self.limits.ordinal)?;
        // Each argument sits in its own 8-byte slot; the runtime reads the parameter's
        // size from the slot's address (the value, on little-endian hosts).
        let mut slots = args.slots;
        let mut params: [*mut c_void; MAX_KERNEL_ARGS] = [std::ptr::null_mut(); MAX_KERNEL_ARGS];
        for (p, s) in params.iter_mut().zip(slots.iter_mut()) {
            *p = s as *mut u64 as *mut c_void;
        }
        // SAFETY: the caller guarantees the arguments and stream; `params` points at
        // `slots`, which outlive the call (the runtime copies the values at launch),
        // and `self` keeps the module loaded.
        unsafe {
            ffi::launch(
                self.function,
                dims.grid,
                dims.block,
                dims.smem_bytes,
                stream.handle(),
                &mut params[..args.len],
            )
        }
    }
}

impl crate::LoadedKernel for HipKernel {
    fn name(&self) -> &str {
        &self.kernel
    }

    fn variant(&self) -> &str {
        &self.variant
    }

    fn info(&self) -> &DeviceInfo {
        &self.limits
    }
}
