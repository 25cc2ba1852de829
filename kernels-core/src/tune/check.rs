//! The output checks: in every search each candidate is run once on the problem being
//! tuned and compared with the analytic default's run before it is timed
//! ([`OutputCheck`]), and [`verify`] ([`verify_each`]) runs a config once and compares it with the
//! kernel's CPU reference (`kernels tables check --served`).

use crate::{Backend, BufferRole, Expected, PlannedKernel, Result, Runtime, Tunable, TuneBuffer};

/// What a candidate's outcome starts with when its output differs from the analytic
/// default's beyond the kernel's tolerance ([`PlannedKernel::check_outputs`]): such a
/// candidate is reported, never timed and never chosen.
pub const WRONG_OUTPUT: &str = "wrong output: ";

/// The bytes of every buffer of a problem ([`PlannedKernel::buffers`] order), read
/// back once the work enqueued on `stream` has run.
pub(crate) fn read_buffers<B: Backend>(stream: &B::Stream, buffers: &[TuneBuffer]) -> Result<Vec<Vec<u8>>> {
    buffers
        .iter()
        .map(|b| {
            let mut host = vec![0u8; b.bytes];
            // SAFETY: `b.ptr` is valid for b.bytes by the PlannedKernel contract.
            unsafe { B::read_back(stream, b.ptr, &mut host) }?;
            Ok(host)
        })
        .collect()
}

/// A run's buffers against `expected`: the ones the kernel only reads must be as they
/// were (`before`; those above [`UNREAD_LIMIT`] were not read back, see
/// [`OutputCheck::read_run`]), then the kernel's own check.
fn check_run<K: PlannedKernel>(
    problem: &K::Problem<'_>,
    buffers: &[TuneBuffer],
    before: &[Vec<u8>],
    got: &[Vec<u8>],
    expected: Expected<'_>,
) -> std::result::Result<(), String> {
    for ((b, was), now) in buffers.iter().zip(before).zip(got) {
        if b.role == BufferRole::Read && !unread(b) && was != now {
            let i = was.iter().zip(now).position(|(a, b)| a != b).unwrap_or(0);
            return Err(format!("`{}` is only read, but its byte {i} changed", b.name));
        }
    }
    K::check_outputs(problem, before, got, expected)
}

/// A search's comparison: the problem's buffers before any run (on the host, and on
/// the device for the buffers a run only writes, which are put back before each
/// check so an element a candidate leaves unwritten shows), and the analytic default's
/// buffers once it has run.
pub(crate) struct OutputCheck<'s, B: Backend> {
    stream: &'s B::Stream,
    buffers: Vec<TuneBuffer>,
    before: Vec<Vec<u8>>,
    written: Vec<(TuneBuffer, B::Buffer)>,
    default: Option<Vec<Vec<u8>>>,
    /// Where the runs after the default's are read back, allocated by the first of them
    /// and reused: a fresh host buffer per candidate paid the first touch of every page
    /// again, for outputs of up to gigabytes (a GEMM of 8192 rows by 152064 columns).
    scratch: Vec<Vec<u8>>,
}

impl<'s, B: Backend> OutputCheck<'s, B> {
    /// Reads `buffers` (a problem's) before anything runs and keeps a device copy of
    /// each `Write` buffer (copied on the device: uploading the host copy sent up to
    /// gigabytes of output back over the bus).
    pub(crate) fn new(stream: &'s B::Stream, buffers: &[TuneBuffer]) -> Result<Self> {
        let before = read_buffers::<B>(stream, buffers)?;
        let written = buffers
            .iter()
            .filter(|b| b.role == BufferRole::Write)
            .map(|b| Ok((*b, crate::tune::search::backend::snapshot::<B>(stream, b)?)))
            .collect::<Result<_>>()?;
        Ok(OutputCheck {
            stream,
            buffers: buffers.to_vec(),
            before,
            written,
            default: None,
            scratch: Vec::new(),
        })
    }

    /// Puts every `Write` buffer back as it was before the search (stream-ordered).
    pub(crate) fn restore_written(&self) -> Result<()> {
        for (b, copy) in &self.written {
            // SAFETY: the copy was made of `b` and holds b.bytes; `b.ptr` is valid for
            // them by the PlannedKernel contract.
            unsafe { B::copy(self.stream, b.ptr, B::address(copy), b.bytes) }?;
        }
        Ok(())
    }

    /// Whether candidate `index` can be checked: the analytic default (index 0)
    /// always, another only once the default's output is there to compare with.
    pub(crate) fn ready(&self, index: usize) -> std::result::Result<(), String> {
        if index != 0 && self.default.is_none() {
            return Err(
                "not checked: the analytic default did not run, so there is no output to compare with".into(),
            );
        }
        Ok(())
    }

    /// Checks candidate `index`'s run, just made on `problem` from the buffers as they
    /// were before the search: the default's (index 0) becomes the comparison; another
    /// candidate must match it within [`PlannedKernel::check_outputs`] for two runs, or
    /// the error starts with [`WRONG_OUTPUT`]. Read-only buffers above
    /// [`UNREAD_LIMIT`] are not read back for it (the kernel's check sees them as they
    /// were): [`OutputCheck::verify_unread`] compares them once, after the search.
    pub(crate) fn check<K: PlannedKernel>(
        &mut self,
        index: usize,
        problem: &K::Problem<'_>,
    ) -> std::result::Result<(), String> {
        self.ready(index)?;
        let Some(want) = &self.default else {
            let mut got = Vec::new();
            self.read_run(&mut got).map_err(|e| e.to_string())?;
            self.default = Some(got);
            return Ok(());
        };
        let mut got = std::mem::take(&mut self.scratch);
        let outcome = match self.read_run(&mut got) {
            Ok(()) => check_run::<K>(problem, &self.buffers, &self.before, &got, Expected::Run(want))
                .map_err(|e| format!("{WRONG_OUTPUT}{e}")),
            Err(e) => Err(e.to_string()),
        };
        self.scratch = got;
        outcome
    }
}

impl<B: Backend> OutputCheck<'_, B> {
    /// Every buffer after a run (stream-ordered), into `into`, one host buffer each,
    /// overwritten in place where `into` already holds it at its size: read back, except
    /// the read-only ones above [`UNREAD_LIMIT`], given empty (see
    /// [`PlannedKernel::check_outputs`] and [`OutputCheck::verify_unread`]), rather than
    /// a host copy of what they held: for the largest GEMM shapes that was a gigabyte
    /// copied, and compared with itself, for every candidate checked.
    fn read_run(&self, into: &mut Vec<Vec<u8>>) -> Result<()> {
        into.resize_with(self.buffers.len(), Vec::new);
        for (b, host) in self.buffers.iter().zip(into.iter_mut()) {
            if unread(b) {
                host.clear();
                continue;
            }
            host.resize(b.bytes, 0);
            // SAFETY: `b.ptr` is valid for b.bytes by the PlannedKernel contract.
            unsafe { B::read_back(self.stream, b.ptr, host) }?;
        }
        Ok(())
    }

    /// After a search: every read-only buffer [`OutputCheck::check`] did not read back
    /// per candidate, compared with its contents from before the search. An error names
    /// the buffer that changed: some candidate wrote into it, so no result of the
    /// search can be trusted.
    pub(crate) fn verify_unread(&self) -> std::result::Result<(), String> {
        // Piece by piece through one host buffer: these are the largest buffers (up to
        // gigabytes of weights), and a host copy of each whole paid its first touch.
        for (b, was) in self.buffers.iter().zip(&self.before).filter(|(b, _)| unread(b)) {
            let changed = first_change(was, UNREAD_PIECE, |at, now| {
                // SAFETY: `b.ptr` is valid for b.bytes by the PlannedKernel contract, and
                // the piece lies within them (`was` is the host copy of all b.bytes).
                unsafe { B::read_back(self.stream, b.ptr + at as u64, now) }
            })
            .map_err(|e| e.to_string())?;
            if let Some(i) = changed {
                return Err(format!(
                    "`{}` is only read, but after the search its byte {i} had changed: a candidate wrote into it",
                    b.name
                ));
            }
        }
        Ok(())
    }
}

/// Read-only buffers larger than this (64 MiB: GEMM and MoE weights reach gigabytes)
/// are verified once after a search instead of read back after every candidate's check.
pub const UNREAD_LIMIT: usize = 64 << 20;

/// The pieces [`OutputCheck::verify_unread`] reads those buffers back in.
const UNREAD_PIECE: usize = 64 << 20;

/// The first byte at which a buffer differs from `was`, its earlier contents, reading
/// it `piece` bytes at a time through one host buffer: `read(at, into)` fills `into`
/// with the buffer's bytes from `at` on.
fn first_change(
    was: &[u8],
    piece: usize,
    mut read: impl FnMut(usize, &mut [u8]) -> Result<()>,
) -> Result<Option<usize>> {
    let piece = piece.max(1);
    let mut now = Vec::new();
    for (i, was) in was.chunks(piece).enumerate() {
        let at = i * piece;
        now.resize(was.len(), 0);
        read(at, &mut now)?;
        // A slice comparison first (a memcmp); the byte only where the piece differs.
        if was != now.as_slice() {
            let j = was.iter().zip(&now).position(|(a, b)| a != b).unwrap_or(0);
            return Ok(Some(at + j));
        }
    }
    Ok(None)
}

fn unread(b: &TuneBuffer) -> bool {
    b.role == BufferRole::Read && b.bytes > UNREAD_LIMIT
}

/// Runs `config` of `K` once on the problem the tuner makes for `key` and `batch`
/// ([`Tunable::tuning_inputs`]) and compares every buffer with the kernel's CPU
/// reference ([`PlannedKernel::reference`], [`PlannedKernel::check_outputs`] for one
/// run). The error says what differed, or why it did not run.
pub fn verify<B: Backend, K: Tunable>(
    rt: &Runtime<B>,
    stream: &B::Stream,
    key: &K::Key,
    batch: u64,
    config: &K::Config,
) -> std::result::Result<(), String> {
    verify_each::<B, K>(rt, stream, key, batch, std::slice::from_ref(config))?
        .pop()
        .unwrap_or_else(|| Err("no run".into()))
}

/// [`verify`] for several configs of one problem: the inputs made and uploaded once and
/// the CPU reference computed once (GEMM and MoE weights reach gigabytes), then each
/// config run on the buffers as they were (the written ones put back before each run)
/// and compared with the reference; one verdict per config, in order. Read-only buffers
/// above [`UNREAD_LIMIT`] are compared with their contents once, after the last run:
/// where one changed, the error is the whole call's, since any config may have written
/// it.
pub fn verify_each<B: Backend, K: Tunable>(
    rt: &Runtime<B>,
    stream: &B::Stream,
    key: &K::Key,
    batch: u64,
    configs: &[K::Config],
) -> std::result::Result<Vec<std::result::Result<(), String>>, String> {
    let owned = crate::backend::Owned::<B>::upload(stream, &K::tuning_inputs(key, batch))
        .map_err(|e| e.to_string())?;
    let problem = K::tuning_problem(key, batch, owned.addresses());
    let buffers = K::buffers(&problem);
    let check = OutputCheck::<B>::new(stream, &buffers).map_err(|e| e.to_string())?;
    let want = K::reference(&problem, &check.before)
        .ok_or_else(|| format!("kernel `{}` has no CPU reference", K::SCHEMA.kernel))?;
    let mut got = Vec::new();
    let verdicts = configs
        .iter()
        .map(|config| {
            check.restore_written().map_err(|e| e.to_string())?;
            rt.launch_config::<K>(stream, config, &problem)
                .map_err(|e| e.to_string())?;
            check.read_run(&mut got).map_err(|e| e.to_string())?;
            check_run::<K>(
                &problem,
                &buffers,
                &check.before,
                &got,
                Expected::Reference(&want),
            )
        })
        .collect();
    check.verify_unread()?;
    Ok(verdicts)
}

#[cfg(test)]
mod tests {
    use super::first_change;

    #[test]
    fn first_change_finds_a_byte_in_any_piece() {
        let was: Vec<u8> = (0..50u8).collect();
        // Pieces of 7 bytes (the last one short), 1 byte and the whole buffer at once.
        for piece in [7, 1, 50, 64] {
            for changed in [None, Some(0), Some(6), Some(7), Some(30), Some(49)] {
                let mut now = was.clone();
                if let Some(i) = changed {
                    now[i] ^= 0x80;
                }
                let mut reads = Vec::new();
                let found = first_change(&was, piece, |at, into| {
                    reads.push((at, into.len()));
                    into.copy_from_slice(&now[at..at + into.len()]);
                    Ok(())
                })
                .unwrap();
                assert_eq!(found, changed, "piece {piece}");
                // Contiguous reads from 0 that stop at the piece holding the change.
                let mut next = 0;
                for &(at, len) in &reads {
                    assert_eq!(at, next, "piece {piece}");
                    assert!(len <= piece && len > 0, "piece {piece}");
                    next = at + len;
                }
                let stop = changed
                    .map_or(was.len(), |i| (i / piece + 1) * piece)
                    .min(was.len());
                assert_eq!(next, stop, "piece {piece}, change {changed:?}");
            }
        }
    }
}
