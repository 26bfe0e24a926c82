//! Device faults: out-of-memory on a GPU is a result, so it must be recognized wherever it
//! surfaces.
//!
//! CubeCL allocates on its device thread (`DSD-0-0`); when an allocation fails it panics there
//! (`can't allocate buffer of size: N`) and the training thread sees nothing directly: later
//! kernels fail with `Memory page 0 doesn't exist`, reads return garbage, and the loss becomes
//! NaN. A process-wide panic hook ([`install_panic_hook`]) records the first allocation failure
//! of any thread; the job then ends as `out_of_memory` with the bytes requested, whatever error
//! or NaN follows ([`first_fault`]).

pub use memwall_core::measure::OutOfMemory;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// How one line or message of a backend reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// An allocation failed (out of device or host memory); bytes if stated.
    Allocation(Option<u64>),
    /// A failure that follows an allocation failure on a poisoned device (a freed or never
    /// allocated memory page, a missing resource).
    FollowOn,
}

/// Classifies a backend message: CubeCL's `can't allocate buffer of size: N`, CUDA's
/// `CUDA_ERROR_OUT_OF_MEMORY` / `out of memory`, Rust's `memory allocation of N bytes failed`;
/// or the follow-on errors of a poisoned CubeCL device (`Memory page N doesn't exist`,
/// `couldn't find resource for that handle`). `None` for anything else.
pub fn classify(message: &str) -> Option<Fault> {
    let m = message.to_ascii_lowercase();
    const ALLOC: [&str; 6] = [
        "can't allocate buffer of size",
        "out of memory",
        "out-of-memory",
        "outofmemory",
        "out_of_memory",
        "memory allocation of",
    ];
    if ALLOC.iter().any(|p| m.contains(p)) {
        return Some(Fault::Allocation(requested_bytes(&m)));
    }
    if m.contains("doesn't exist") && m.contains("memory page")
        || m.contains("couldn't find resource for that handle")
    {
        return Some(Fault::FollowOn);
    }
    None
}

/// The byte count in `can't allocate buffer of size: N` or `memory allocation of N bytes`.
fn requested_bytes(lower: &str) -> Option<u64> {
    let digits_after = |marker: &str| {
        let at = lower.find(marker)? + marker.len();
        let rest = lower[at..].trim_start();
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        rest[..end].parse().ok()
    };
    digits_after("buffer of size:").or_else(|| digits_after("memory allocation of"))
}

/// The live heap bytes in the CPU memory limit's refusal (`... with M bytes live`,
/// `crate::measure::alloc`), the bytes live when the block was refused; `None` for any
/// other message.
pub fn live_bytes(message: &str) -> Option<u64> {
    let m = message.to_ascii_lowercase();
    let end = m.find(" bytes live")?;
    let start = m[..end].rfind("with ")? + "with ".len();
    m[start..end].trim().parse().ok()
}

/// Reads a sequence of log lines (a backend's stderr) as the job's fault: the first
/// allocation failure, with the follow-on failures after it counted. `None` when no line
/// reports an allocation failure (follow-on lines alone are not an out-of-memory).
pub fn from_lines<'a>(lines: impl IntoIterator<Item = &'a str>) -> Option<OutOfMemory> {
    let mut first: Option<OutOfMemory> = None;
    for line in lines {
        match (classify(line), first.as_mut()) {
            (Some(Fault::Allocation(bytes)), None) => {
                let mut oom = OutOfMemory::first(bytes, line, None);
                oom.live_bytes = live_bytes(line);
                first = Some(oom)
            }
            (Some(_), Some(f)) => f.follow_on_failures += 1,
            _ => {}
        }
    }
    first
}

static FIRST: Mutex<Option<OutOfMemory>> = Mutex::new(None);
static FOLLOW_ON: AtomicU64 = AtomicU64::new(0);
static POOL: Mutex<Option<(u64, u64)>> = Mutex::new(None);

/// Notes the memory pool's latest reading (bytes in use, bytes reserved), kept with an
/// allocation failure recorded after it.
pub fn note_pool(in_use_bytes: u64, reserved_bytes: u64) {
    *POOL.lock().unwrap_or_else(|p| p.into_inner()) = Some((in_use_bytes, reserved_bytes));
}

/// Records `message` if it reports a device fault (see [`classify`]); the first allocation
/// failure is kept, later faults are counted.
pub fn record(message: &str) {
    let Some(fault) = classify(message) else {
        return;
    };
    let mut first = FIRST.lock().unwrap_or_else(|p| p.into_inner());
    match (fault, first.as_ref()) {
        (Fault::Allocation(bytes), None) => {
            let pool = *POOL.lock().unwrap_or_else(|p| p.into_inner());
            let mut oom = OutOfMemory::first(bytes, message, pool);
            oom.live_bytes = live_bytes(message);
            *first = Some(oom)
        }
        _ => {
            FOLLOW_ON.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The first allocation failure recorded in this process, if any, with the count of faults
/// after it.
pub fn first_fault() -> Option<OutOfMemory> {
    let first = FIRST.lock().unwrap_or_else(|p| p.into_inner()).clone();
    first.map(|f| OutOfMemory {
        follow_on_failures: FOLLOW_ON.load(Ordering::Relaxed),
        ..f
    })
}

/// Forgets recorded faults (tests; a job process records one job).
pub fn clear() {
    *FIRST.lock().unwrap_or_else(|p| p.into_inner()) = None;
    *POOL.lock().unwrap_or_else(|p| p.into_inner()) = None;
    FOLLOW_ON.store(0, Ordering::Relaxed);
}

/// Installs a panic hook (once per process) that [`record`]s every panic's message, on any
/// thread, then runs the previous hook, except for device faults after the first allocation
/// failure: a poisoned CubeCL device panics thousands of times with the same follow-on
/// message, which would bury the log (they are counted instead).
pub fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let message = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("");
            let repeated = first_fault().is_some() && classify(message).is_some();
            record(message);
            if !repeated {
                previous(info);
            }
        }));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_cubecl_cuda_and_host_messages() {
        assert_eq!(
            classify("called `Result::unwrap()` on an `Err` value: can't allocate buffer of size: 67108864"),
            Some(Fault::Allocation(Some(67_108_864)))
        );
        assert_eq!(
            classify("memory allocation of 8000000000000 bytes failed"),
            Some(Fault::Allocation(Some(8_000_000_000_000)))
        );
        assert_eq!(
            classify("CUDA_ERROR_OUT_OF_MEMORY"),
            Some(Fault::Allocation(None))
        );
        assert_eq!(
            classify("couldn't find resource for that handle: Memory page 0 doesn't exist"),
            Some(Fault::FollowOn)
        );
        assert_eq!(classify("training loss is NaN at step 9 (diverged)"), None);
        assert_eq!(classify("index out of bounds"), None);
    }

    /// The CPU limit's refusal names the block and the bytes live: their sum bounds the peak
    /// the job needed from below.
    #[test]
    fn the_limits_refusal_gives_the_requested_and_live_bytes() {
        let line = "memory allocation of 2097152 bytes refused by the job's memory limit \
                    (out of memory) with 11534336 bytes live";
        let oom = from_lines([line]).unwrap();
        assert_eq!(oom.requested_bytes, Some(2_097_152));
        assert_eq!(oom.live_bytes, Some(11_534_336));
        assert_eq!(oom.needed_at_least_bytes(), Some(13_631_488));
        assert_eq!(live_bytes("memory allocation of 8 bytes failed"), None);
    }

    #[test]
    fn follow_on_lines_alone_are_not_out_of_memory() {
        let lines = ["Resource to exist.: couldn't find resource for that handle: Memory page 0 doesn't exist"];
        assert_eq!(from_lines(lines), None);
    }
}
