//! What a launch is made of, whatever the backend: its dimensions ([`LaunchDims`]) and
//! its arguments as raw device pointers and scalars ([`KernelArgs`]).

use crate::{DeviceInfo, Error, Result};

/// Most blocks in a thread-block cluster (Hopper); more than
/// [`MAX_PORTABLE_CLUSTER`] is a non-portable size the launch allows on the function.
pub const MAX_CLUSTER: u32 = 16;
/// Most blocks in a cluster every cluster-capable device runs.
pub const MAX_PORTABLE_CLUSTER: u32 = 8;

/// Grid, block, dynamic shared memory and cluster size of one launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchDims {
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    /// Dynamic shared memory per block, bytes.
    pub smem_bytes: u32,
    /// Blocks per thread-block cluster along x, as the kernel declares it with
    /// `__cluster_dims__` (1: no cluster). The launch checks it and, above
    /// [`MAX_PORTABLE_CLUSTER`], allows the non-portable size on the function first.
    pub cluster: u32,
    /// The shared memory carveout to ask for, as a percentage of the most shared
    /// memory an SM has (NVIDIA's `PREFERRED_SHARED_MEMORY_CARVEOUT`; the driver rounds
    /// it up to a size the SM supports, and the rest of the SM's 256 KiB is L1). `None`
    /// leaves the driver's choice. The CUDA launch sets it on the function when it
    /// differs from the last value set there; AMD devices have no such split, and a
    /// launch that asks for one there is refused.
    pub carveout: Option<u8>,
    /// The kernel is persistent: its blocks (or clusters) walk the work with a stride of
    /// the grid, so any whole number of clusters computes the same result. With clusters,
    /// the CUDA launch then lowers `grid.0` to the clusters the device holds at once
    /// (`cuOccupancyMaxActiveClusters`, asked once per function, at its first launch
    /// outside a graph capture; launches captured before that keep `grid.0`): a cluster of 4 needs
    /// four free SMs of one GPC, and where the GPCs' SM counts are not multiples of 4
    /// fewer than `sm_count / 4` fit; one launched beyond them would wait for a second
    /// wave, doubling the time of its work.
    pub persistent: bool,
}

impl LaunchDims {
    /// A 1-D launch of `grid` blocks of `block` threads, no dynamic shared memory.
    pub const fn linear(grid: u32, block: u32) -> LaunchDims {
        LaunchDims {
            grid: (grid, 1, 1),
            block: (block, 1, 1),
            smem_bytes: 0,
            cluster: 1,
            carveout: None,
            persistent: false,
        }
    }

    /// The same launch with `bytes` of dynamic shared memory per block.
    pub const fn with_smem(self, bytes: u32) -> LaunchDims {
        LaunchDims {
            smem_bytes: bytes,
            ..self
        }
    }

    /// The same launch with the shared memory carveout set to `percent` of the SM's
    /// most shared memory (see [`LaunchDims::carveout`]).
    pub const fn with_carveout(self, percent: u8) -> LaunchDims {
        LaunchDims {
            carveout: Some(percent),
            ..self
        }
    }

    /// The same launch of a persistent kernel (see [`LaunchDims::persistent`]).
    pub const fn with_persistent(self) -> LaunchDims {
        LaunchDims {
            persistent: true,
            ..self
        }
    }

    /// The same launch for a kernel compiled with `__cluster_dims__(blocks, 1, 1)`.
    pub const fn with_cluster(self, blocks: u32) -> LaunchDims {
        LaunchDims {
            cluster: blocks,
            ..self
        }
    }

    /// Checks the launch against the device's limits; the error names `grid`, `block`,
    /// `smem_bytes`, `cluster` or `carveout` and the limit.
    pub fn validate(&self, info: &DeviceInfo) -> Result<()> {
        let (gx, gy, gz) = self.grid;
        let (bx, by, bz) = self.block;
        if gx == 0 || gy == 0 || gz == 0 {
            return Err(Error::invalid(
                "grid",
                format!("{:?} has a zero dimension", self.grid),
            ));
        }
        let (mx, my, mz) = info.max_grid;
        if gx > mx || gy > my || gz > mz {
            return Err(Error::invalid(
                "grid",
                format!("{:?} exceeds the device's {:?}", self.grid, info.max_grid),
            ));
        }
        let threads = bx as u64 * by as u64 * bz as u64;
        if threads == 0 || threads > info.max_threads_per_block as u64 {
            return Err(Error::invalid(
                "block",
                format!(
                    "{:?} is {threads} threads; the device allows 1..={}",
                    self.block, info.max_threads_per_block
                ),
            ));
        }
        if self.smem_bytes > info.max_smem_per_block_optin {
            return Err(Error::invalid(
                "smem_bytes",
                format!(
                    "{} bytes exceeds the device's {} bytes per block",
                    self.smem_bytes, info.max_smem_per_block_optin
                ),
            ));
        }
        if let Some(pct) = self.carveout {
            if pct > 100 {
                return Err(Error::invalid(
                    "carveout",
                    format!("{pct}% is not a percentage of the SM's shared memory"),
                ));
            }
            if info.amd_arch.is_some() {
                return Err(Error::invalid(
                    "carveout",
                    format!("{} has no configurable shared memory / L1 split", info.name),
                ));
            }
        }
        let clusters = info.amd_arch.is_none() && info.compute_capability >= (9, 0);
        if self.cluster == 0 || self.cluster > MAX_CLUSTER || (self.cluster > 1 && !clusters) {
            return Err(Error::invalid(
                "cluster",
                format!(
                    "{} blocks per cluster; clusters of 2..={MAX_CLUSTER} blocks need an NVIDIA device of compute capability 9.0 or newer ({})",
                    self.cluster, info.name
                ),
            ));
        }
        if !gx.is_multiple_of(self.cluster) {
            return Err(Error::invalid(
                "grid",
                format!(
                    "{gx} blocks is not a whole number of {}-block clusters",
                    self.cluster
                ),
            ));
        }
        Ok(())
    }
}

/// Most arguments [`KernelArgs`] holds.
pub const MAX_KERNEL_ARGS: usize = 24;

/// Most [`TensorMap2d`] arguments one [`KernelArgs`] holds.
pub const MAX_TENSOR_MAPS: usize = 4;

/// Element type of a [`TensorMap2d`] (16-bit floats or 32-bit floats).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TmaElement {
    Bf16,
    F16,
    F32,
}

impl TmaElement {
    /// Bytes per element.
    pub const fn size(self) -> u64 {
        match self {
            TmaElement::Bf16 | TmaElement::F16 => 2,
            TmaElement::F32 => 4,
        }
    }
}

/// Shared-memory swizzle of a [`TensorMap2d`] box: the span, in bytes, whose 16-byte
/// chunks are permuted (the box's inner dimension must fit in it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TmaSwizzle {
    None,
    B32,
    B64,
    B128,
}

/// A tiled 2-D view of a row-major matrix for NVIDIA's tensor memory accelerator (TMA):
/// the description the CUDA launch encodes (`cuTensorMapEncodeTiled`) into the 128-byte
/// `CUtensorMap` a kernel takes as a `const __grid_constant__` parameter. Boxes that
/// reach past the matrix are zero-filled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TensorMap2d {
    /// Device address of element (0, 0); 16-byte aligned.
    pub ptr: u64,
    pub element: TmaElement,
    /// Columns (the contiguous dimension) and rows.
    pub cols: u64,
    pub rows: u64,
    /// Bytes between rows; a multiple of 16.
    pub row_bytes: u64,
    /// The box one copy moves: columns and rows, each 1..=256.
    pub box_cols: u32,
    pub box_rows: u32,
    pub swizzle: TmaSwizzle,
}

impl TensorMap2d {
    /// Checks the rules the encoder enforces, so a bad map is refused before launch;
    /// the error names `name`.
    pub fn check(&self, name: &str) -> Result<()> {
        let why = if self.ptr == 0 || !self.ptr.is_multiple_of(16) {
            format!("address {:#x} is not a 16-byte aligned device pointer", self.ptr)
        } else if !self.row_bytes.is_multiple_of(16) || self.row_bytes >= 1 << 40 {
            format!(
                "a row stride of {} bytes is not a multiple of 16 below 2^40",
                self.row_bytes
            )
        } else if self.rows > 1 && self.row_bytes < self.cols * self.element.size() {
            format!("a row stride of {} bytes is shorter than a row", self.row_bytes)
        } else if self.cols == 0 || self.rows == 0 || self.cols > 1 << 32 || self.rows > 1 << 32 {
            format!(
                "{}x{} elements is outside 1..=2^32 per dimension",
                self.rows, self.cols
            )
        } else if !(1..=256).contains(&self.box_cols) || !(1..=256).contains(&self.box_rows) {
            format!(
                "a box of {}x{} is outside 1..=256 per dimension",
                self.box_rows, self.box_cols
            )
        } else if !(u64::from(self.box_cols) * self.element.size()).is_multiple_of(16) {
            format!(
                "a box row of {} elements is not a multiple of 16 bytes",
                self.box_cols
            )
        } else if u64::from(self.box_cols) * self.element.size()
            > match self.swizzle {
                TmaSwizzle::None => u64::MAX,
                TmaSwizzle::B32 => 32,
                TmaSwizzle::B64 => 64,
                TmaSwizzle::B128 => 128,
            }
        {
            format!(
                "a box row of {} elements exceeds the {:?} swizzle span",
                self.box_cols, self.swizzle
            )
        } else {
            return Ok(());
        };
        Err(Error::invalid(name, format!("tensor map: {why}")))
    }
}

/// Kernel arguments for `Kernel::launch_raw` (CUDA) and `HipKernel::launch` (AMD), held
/// inline (no allocation): raw device pointers and scalars, in the kernel's parameter
/// order, and up to [`MAX_TENSOR_MAPS`] TMA descriptions ([`TensorMap2d`], CUDA only:
/// the launch encodes each into the `CUtensorMap` parameter at its place).
///
/// ```
/// use kernels_core::KernelArgs;
/// let mut a = KernelArgs::new();
/// a.ptr(0x7f00_0000_0000).ptr(0x7f00_0010_0000).i32(4096).f32(1e-6);
/// assert_eq!(a.len(), 4);
/// ```
#[derive(Clone, Debug)]
pub struct KernelArgs {
    // Each argument sits in its own 8-byte slot; the driver reads `sizeof(param)`
    // bytes from the slot's address, which on little-endian targets is the value.
    pub(crate) slots: [u64; MAX_KERNEL_ARGS],
    pub(crate) len: usize,
    pub(crate) overflow: bool,
    /// Bit i set: argument i is `maps[slots[i]]`, a tensor map, not a scalar.
    pub(crate) map_args: u32,
    pub(crate) maps: [Option<TensorMap2d>; MAX_TENSOR_MAPS],
}

impl Default for KernelArgs {
    fn default() -> Self {
        KernelArgs::new()
    }
}

impl KernelArgs {
    /// No arguments.
    pub const fn new() -> KernelArgs {
        KernelArgs {
            slots: [0; MAX_KERNEL_ARGS],
            len: 0,
            overflow: false,
            map_args: 0,
            maps: [None; MAX_TENSOR_MAPS],
        }
    }

    fn push(&mut self, bits: u64) -> &mut Self {
        if self.len < MAX_KERNEL_ARGS {
            self.slots[self.len] = bits;
            self.len += 1;
        } else {
            self.overflow = true;
        }
        self
    }

    /// A device pointer (`T*` parameter).
    pub fn ptr(&mut self, device_ptr: u64) -> &mut Self {
        self.push(device_ptr)
    }
    /// An `int` parameter.
    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.push(v as u32 as u64)
    }
    /// An `unsigned int` parameter.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.push(v as u64)
    }
    /// A `long long` parameter.
    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.push(v as u64)
    }
    /// An `unsigned long long` / `size_t` parameter.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.push(v)
    }
    /// A `float` parameter.
    pub fn f32(&mut self, v: f32) -> &mut Self {
        self.push(v.to_bits() as u64)
    }
    /// A `double` parameter.
    pub fn f64(&mut self, v: f64) -> &mut Self {
        self.push(v.to_bits())
    }

    /// A `const __grid_constant__ CUtensorMap` parameter, encoded from `map` at launch
    /// (CUDA only; other backends refuse the arguments). Check the map first with
    /// [`TensorMap2d::check`].
    pub fn tensor_map(&mut self, map: TensorMap2d) -> &mut Self {
        let used = self.map_args.count_ones() as usize;
        if used == MAX_TENSOR_MAPS || self.len == MAX_KERNEL_ARGS {
            self.overflow = true;
            return self;
        }
        self.maps[used] = Some(map);
        self.map_args |= 1 << self.len;
        self.push(used as u64)
    }

    /// The tensor maps pushed, with their parameter positions.
    pub fn tensor_maps(&self) -> impl Iterator<Item = (usize, &TensorMap2d)> {
        (0..self.len)
            .filter(|i| self.map_args & (1 << i) != 0)
            .filter_map(|i| self.maps[self.slots[i] as usize].as_ref().map(|m| (i, m)))
    }

    /// Whether any argument is a tensor map.
    pub fn has_tensor_maps(&self) -> bool {
        self.map_args != 0
    }

    /// Number of arguments pushed.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no argument was pushed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The pushed arguments, one 8-byte slot each (a pointer, or a scalar's bits in
    /// the low bytes; a tensor map's index among [`KernelArgs::tensor_maps`]), in
    /// parameter order.
    pub fn slots(&self) -> &[u64] {
        &self.slots[..self.len]
    }

    /// Whether more than [`MAX_KERNEL_ARGS`] arguments were pushed (launches refuse it).
    pub fn overflowed(&self) -> bool {
        self.overflow
    }
}

/// Two argument lists are equal when they pass the same bytes to the kernel.
impl PartialEq for KernelArgs {
    fn eq(&self, other: &KernelArgs) -> bool {
        self.slots() == other.slots()
            && self.overflow == other.overflow
            && self.map_args == other.map_args
            && self.maps == other.maps
    }
}

#[cfg(test)]
mod tests {
    use tuned::Target;

    use super::*;

    fn field(e: Error) -> String {
        e.to_string()
    }

    #[test]
    fn clusters_are_checked_against_the_grid_and_the_device() {
        let h200 = DeviceInfo::nominal(Target::Sm90).unwrap();
        let a100 = DeviceInfo::nominal(Target::Sm80).unwrap();
        let plain = LaunchDims::linear(24, 128);
        assert_eq!(plain.cluster, 1);
        assert!(plain.validate(&h200).is_ok());
        assert!(plain.validate(&a100).is_ok());
        // 16-block clusters (non-portable) run on Hopper with a whole number of them.
        assert!(LaunchDims::linear(32, 128)
            .with_cluster(16)
            .validate(&h200)
            .is_ok());
        let e = field(plain.with_cluster(16).validate(&h200).unwrap_err());
        assert!(e.contains("grid") && e.contains("16-block clusters"), "{e}");
        for bad in [0, 17, 32] {
            let e = field(
                LaunchDims::linear(64, 128)
                    .with_cluster(bad)
                    .validate(&h200)
                    .unwrap_err(),
            );
            assert!(e.contains("cluster"), "{e}");
        }
        // No clusters before compute capability 9.0.
        let e = field(
            LaunchDims::linear(8, 128)
                .with_cluster(2)
                .validate(&a100)
                .unwrap_err(),
        );
        assert!(e.contains("cluster") && e.contains("A100"), "{e}");
    }

    fn map() -> TensorMap2d {
        TensorMap2d {
            ptr: 0x7f00_0000_0000,
            element: TmaElement::Bf16,
            cols: 4096,
            rows: 100,
            row_bytes: 8192,
            box_cols: 64,
            box_rows: 128,
            swizzle: TmaSwizzle::B128,
        }
    }

    #[test]
    fn tensor_maps_sit_among_the_scalars_and_are_checked() {
        let mut a = KernelArgs::new();
        a.ptr(1)
            .tensor_map(map())
            .i32(3)
            .tensor_map(TensorMap2d { rows: 7, ..map() });
        assert_eq!(a.len(), 4);
        assert!(a.has_tensor_maps() && !a.overflowed());
        let got: Vec<_> = a.tensor_maps().map(|(i, m)| (i, m.rows)).collect();
        assert_eq!(got, [(1, 100), (3, 7)]);
        let mut b = KernelArgs::new();
        b.ptr(1).tensor_map(map()).i32(3).tensor_map(map());
        assert_ne!(a, b, "equal slots, different maps");
        let mut full = KernelArgs::new();
        for _ in 0..=MAX_TENSOR_MAPS {
            full.tensor_map(map());
        }
        assert!(full.overflowed());

        assert!(map().check("a").is_ok());
        for bad in [
            TensorMap2d {
                ptr: 0x7f00_0000_0008,
                ..map()
            },
            TensorMap2d {
                row_bytes: 8194,
                ..map()
            },
            TensorMap2d {
                row_bytes: 4096,
                ..map()
            },
            TensorMap2d {
                box_cols: 128,
                ..map()
            },
            TensorMap2d {
                box_rows: 512,
                ..map()
            },
            TensorMap2d { box_cols: 4, ..map() },
        ] {
            let e = bad.check("b").unwrap_err().to_string();
            assert!(e.contains('b') && e.contains("tensor map"), "{e}");
        }
    }

    #[test]
    fn carveouts_are_percentages_and_nvidia_only() {
        let h200 = DeviceInfo::nominal(Target::Sm90).unwrap();
        let mi300 = DeviceInfo {
            name: "AMD Instinct MI300X".into(),
            amd_arch: Some("gfx942".into()),
            ..h200.clone()
        };
        let plain = LaunchDims::linear(24, 128);
        assert_eq!(plain.carveout, None);
        assert!(plain.validate(&mi300).is_ok());
        for pct in [0, 85, 100] {
            let d = plain.with_carveout(pct);
            assert_eq!(d.carveout, Some(pct));
            assert!(d.validate(&h200).is_ok(), "{pct}");
        }
        let e = field(plain.with_carveout(101).validate(&h200).unwrap_err());
        assert!(e.contains("carveout") && e.contains("101%"), "{e}");
        let e = field(plain.with_carveout(85).validate(&mi300).unwrap_err());
        assert!(e.contains("carveout") && e.contains("no configurable"), "{e}");
    }
}
