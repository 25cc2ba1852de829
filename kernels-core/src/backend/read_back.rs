//! Reading device memory back to the host ([`ReadBack`]), which the output checks of
//! searches and of served variants need (`crate::verify`), for every backend's stream.

use crate::Result;

/// A stream that can copy device memory to the host once the work enqueued on it
/// before has run. Every backend's stream type implements it.
pub trait ReadBack {
    /// Waits for the work enqueued so far, then copies `dst.len()` bytes from device
    /// address `src` into `dst`.
    ///
    /// # Safety
    /// `src` must be device memory of the stream's device, valid for `dst.len()` bytes.
    unsafe fn read_back(&self, src: u64, dst: &mut [u8]) -> Result<()>;
}

/// CUDA's streams are cudarc's type, so their implementation sits with the trait; the
/// mock's and HIP's are in their backends' folders.
#[cfg(feature = "cuda")]
impl ReadBack for std::sync::Arc<cudarc::driver::CudaStream> {
    unsafe fn read_back(&self, src: u64, dst: &mut [u8]) -> Result<()> {
        let err = |call, e: cudarc::driver::DriverError| crate::Error::Driver {
            call,
            message: e.to_string(),
        };
        // SAFETY: `src` is valid for dst.len() bytes by the caller's contract, and the
        // copy completes before the synchronize returns.
        unsafe { cudarc::driver::result::memcpy_dtoh_async(dst, src, self.cu_stream()) }
            .map_err(|e| err("cuMemcpyDtoHAsync", e))?;
        self.synchronize().map_err(|e| err("cuStreamSynchronize", e))
    }
}
