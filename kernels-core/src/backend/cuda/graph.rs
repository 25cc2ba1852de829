//! CUDA graph timing, a CUDA capability: back-to-back launches captured once and
//! replayed between two events, so launch overhead is excluded and the per-launch
//! time is what a captured decode step sees.

use std::sync::Arc;

use cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaEvent, CudaGraph, CudaStream};

use super::ffi::driver_error;
use crate::{Result, Timing, TimingOptions};

/// A CUDA graph of back-to-back launches, replayed and timed per launch.
pub struct GraphTimer {
    graph: CudaGraph,
    launches: usize,
    stream: Arc<CudaStream>,
}

impl GraphTimer {
    /// Captures `launches` calls of `launch(i % copies)` on `stream` (which must not be
    /// capturing already) and replays the graph once. A failed launch during capture
    /// ends the capture and is returned.
    pub fn capture(
        stream: &Arc<CudaStream>,
        launches: usize,
        copies: usize,
        launch: &mut dyn FnMut(usize) -> Result<()>,
    ) -> Result<GraphTimer> {
        let copies = copies.max(1);
        let launches = launches.max(1);
        stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(|e| driver_error("cuStreamBeginCapture", e))?;
        let mut captured = Ok(());
        for i in 0..launches {
            captured = captured.and_then(|_| launch(i % copies));
        }
        // End the capture whatever happened, so the stream is usable again.
        let graph = stream
            .end_capture(CUgraphInstantiate_flags(0))
            .map_err(|e| driver_error("cuStreamEndCapture", e))?;
        captured?;
        let graph = graph.ok_or_else(|| crate::Error::invalid("launch", "captured no work"))?;
        graph.launch().map_err(|e| driver_error("cuGraphLaunch", e))?;
        Ok(GraphTimer {
            graph,
            launches,
            stream: stream.clone(),
        })
    }

    /// Launches per replay.
    pub fn launches(&self) -> usize {
        self.launches
    }

    /// `replays` replays between two events: microseconds per launch.
    pub fn time_us(&self, replays: u64) -> Result<f64> {
        let event = || -> Result<CudaEvent> {
            self.stream
                .context()
                .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(|e| driver_error("cuEventCreate", e))
        };
        let (a, b) = (event()?, event()?);
        let replays = replays.max(1);
        a.record(&self.stream)
            .map_err(|e| driver_error("cuEventRecord", e))?;
        for _ in 0..replays {
            self.graph
                .launch()
                .map_err(|e| driver_error("cuGraphLaunch", e))?;
        }
        b.record(&self.stream)
            .map_err(|e| driver_error("cuEventRecord", e))?;
        b.synchronize()
            .map_err(|e| driver_error("cuEventSynchronize", e))?;
        let ms = a
            .elapsed_ms(&b)
            .map_err(|e| driver_error("cuEventElapsedTime", e))?;
        Ok(ms as f64 * 1000.0 / (replays * self.launches as u64) as f64)
    }
}

/// [`crate::Backend::time_graph_runs`] on CUDA: `opts.warmup` plain launches (modules
/// loaded, clocks up), then a graph of `launches` calls of `launch(i % copies)`, each
/// of `opts.reps` replays timed between events; the median microseconds per launch.
/// The caller makes `copies` distinct problems (see [`crate::rotation`]); no L2 flush.
pub fn time_graph_runs(
    stream: &Arc<CudaStream>,
    opts: &TimingOptions,
    launches: usize,
    copies: usize,
    launch: &mut dyn FnMut(usize) -> Result<()>,
) -> Result<Timing> {
    opts.check()?;
    let copies = copies.max(1);
    for i in 0..opts.warmup.max(1) as usize {
        launch(i % copies)?;
    }
    let timer = GraphTimer::capture(stream, launches, copies, launch)?;
    let mut us = Vec::with_capacity(opts.reps as usize);
    while !crate::tune::enough_reps(opts, &us, launches) {
        us.push(timer.time_us(1)?);
    }
    Ok(Timing::from_samples(&us, false))
}
