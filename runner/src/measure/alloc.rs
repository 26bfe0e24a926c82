//! A counting global allocator: live heap bytes and their high-water mark.
//!
//! Blocks come from the system allocator. On glibc it is told, once, before the first block, to
//! keep freed memory for reuse ([`keep_freed_memory`]).
//!
//! A memory limit ([`set_limit`]) makes the CPU behave like a device of that size: a block
//! that would take the live bytes past it is refused (the allocator returns null, so Rust's
//! `handle_alloc_error` prints `memory allocation of N bytes failed` and aborts the process),
//! which the job's parent records as `out_of_memory` ([`crate::job::run_in_process`]).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

static CURRENT: AtomicU64 = AtomicU64::new(0);
static PEAK: AtomicU64 = AtomicU64::new(0);
static CONFIGURED: AtomicBool = AtomicBool::new(false);
/// Live bytes past which a block is refused; `u64::MAX`: no limit.
static LIMIT: AtomicU64 = AtomicU64::new(u64::MAX);

/// Tells glibc's malloc to keep freed blocks for reuse instead of returning them to the kernel.
///
/// By default glibc serves every block over its (adaptive) mmap threshold, 128 KiB at first, with
/// its own `mmap` and `munmap`s it on free, and trims the heap top over 128 KiB. A training step
/// frees and allocates the same megabyte-sized activations over and over, so on the CPU backend
/// it paid a page fault for every fresh page: 15% of a flex step's CPU time at the `cpu`
/// profile's shape (issue 28; `reference/perf_step_profile.py`). With the mmap threshold at its
/// largest (32 MiB on 64-bit, glibc's `DEFAULT_MMAP_THRESHOLD_MAX`) and a 1 GiB trim threshold,
/// freed blocks stay in malloc's free lists (`mallopt(3)`). What is counted does not change:
/// the counters see each block's `Layout::size` whatever the allocator does underneath, so the
/// peak stays exact; only the process's resident set keeps its high-water mark.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets malloc parameters; it is called once, outside any allocation.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

/// Runs [`keep_freed_memory`] before the process's first block.
#[inline]
fn configure_once() {
    if !CONFIGURED.load(Ordering::Relaxed) && !CONFIGURED.swap(true, Ordering::Relaxed) {
        keep_freed_memory();
    }
}

/// Wraps the system allocator and counts live bytes (`Layout::size` of each block).
pub struct CountingAlloc;

impl CountingAlloc {
    /// Counts `size` more live bytes, unless that takes them past the limit: then nothing is
    /// counted and the block must be refused (false).
    #[inline]
    fn reserve(size: usize) -> bool {
        let now = CURRENT.fetch_add(size as u64, Ordering::Relaxed) + size as u64;
        if now > LIMIT.load(Ordering::Relaxed) {
            let live = CURRENT.fetch_sub(size as u64, Ordering::Relaxed) - size as u64;
            refused(size, live);
            return false;
        }
        PEAK.fetch_max(now, Ordering::Relaxed);
        if TRACING.load(Ordering::Relaxed) {
            trace::rise(now);
        }
        true
    }
    #[inline]
    fn sub(size: usize) {
        let now = CURRENT.fetch_sub(size as u64, Ordering::Relaxed) - size as u64;
        if TRACING.load(Ordering::Relaxed) {
            trace::fall(now);
        }
    }
}

// SAFETY: every call is forwarded to `System` unchanged; only counters are updated.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        configure_once();
        if !Self::reserve(layout.size()) {
            return std::ptr::null_mut();
        }
        let p = System.alloc(layout);
        if p.is_null() {
            Self::sub(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        configure_once();
        if !Self::reserve(layout.size()) {
            return std::ptr::null_mut();
        }
        let p = System.alloc_zeroed(layout);
        if p.is_null() {
            Self::sub(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        Self::sub(layout.size());
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // The new block is counted before it exists (as a device would refuse it), the old one
        // released once it is gone.
        if !Self::reserve(new_size) {
            return std::ptr::null_mut();
        }
        let p = System.realloc(ptr, layout, new_size);
        if p.is_null() {
            Self::sub(new_size);
        } else {
            Self::sub(layout.size());
        }
        p
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// Live heap bytes of the process now.
pub fn allocated_bytes() -> u64 {
    CURRENT.load(Ordering::Relaxed)
}

/// High-water mark of live heap bytes since the last [`reset_peak`].
pub fn peak_allocated_bytes() -> u64 {
    PEAK.load(Ordering::Relaxed)
}

/// Starts a new high-water mark from the bytes live now.
pub fn reset_peak() {
    PEAK.store(CURRENT.load(Ordering::Relaxed), Ordering::Relaxed);
}

/// Sets the process's memory limit, bytes of live heap (`None`: no limit). From then on a block
/// that would take [`allocated_bytes`] past it is refused, which aborts the process with
/// `memory allocation of N bytes failed` (Rust's `handle_alloc_error`): the CPU stand-in for a
/// device of that size. Blocks live before the call stay; a limit below them refuses the next
/// block.
pub fn set_limit(bytes: Option<u64>) {
    LIMIT.store(bytes.unwrap_or(u64::MAX), Ordering::Relaxed);
}

/// The memory limit set by [`set_limit`], if any.
pub fn limit() -> Option<u64> {
    let l = LIMIT.load(Ordering::Relaxed);
    (l != u64::MAX).then_some(l)
}

/// Says on stderr, without allocating, that the limit refused a block of `size` bytes while
/// `live` bytes were live, in the words the job's fault reader takes both from (`memory
/// allocation of N bytes ... with M bytes live`, [`crate::measure::fault::classify`],
/// [`crate::measure::fault::live_bytes`]): `live + size` is a lower bound of the peak the job
/// needed. glibc Linux only, elsewhere silent.
fn refused(size: usize, live: u64) {
    let mut line = [0u8; 128];
    let mut n = 0;
    let mut put = |bytes: &[u8]| {
        for &b in bytes {
            if n < line.len() {
                line[n] = b;
                n += 1;
            }
        }
    };
    let number = |v: u64, put: &mut dyn FnMut(&[u8])| {
        let mut digits = [0u8; 20];
        let (mut v, mut k) = (v, digits.len());
        loop {
            k -= 1;
            digits[k] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        put(&digits[k..]);
    };
    put(b"memory allocation of ");
    number(size as u64, &mut put);
    put(b" bytes refused by the job's memory limit (out of memory) with ");
    number(live, &mut put);
    put(b" bytes live\n");
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: write(2) of a stack buffer to stderr; no allocation, any result is ignored.
    unsafe {
        libc::write(2, line.as_ptr().cast(), n);
    }
}

/// Whether the allocator records a trace ([`trace::start`]).
static TRACING: AtomicBool = AtomicBool::new(false);

/// The allocator's trace of live bytes over one step: what a memory timeline is drawn from.
///
/// While tracing, every change of the live bytes by at least the grain since the last recorded
/// point, and every new high of the trace, is recorded with its time (monotonic clock, no
/// allocation); so are the marks ([`mark`]) the training loop sets at phase boundaries, each
/// with the high-water mark of the phase it ends. The buffer is static (the allocator cannot
/// allocate); past [`CAPACITY`] points the trace keeps its highs and marks but drops the rest,
/// and says so.
pub mod trace {
    use super::{AtomicU64, AtomicUsize, Ordering, CURRENT, TRACING};

    /// Points the static buffer holds.
    pub const CAPACITY: usize = 1 << 17;
    static TIME_NS: [AtomicU64; CAPACITY] = [const { AtomicU64::new(0) }; CAPACITY];
    static BYTES: [AtomicU64; CAPACITY] = [const { AtomicU64::new(0) }; CAPACITY];
    static LEN: AtomicUsize = AtomicUsize::new(0);
    static DROPPED: AtomicU64 = AtomicU64::new(0);
    static START_NS: AtomicU64 = AtomicU64::new(0);
    static GRAIN: AtomicU64 = AtomicU64::new(16 << 10);
    static LAST: AtomicU64 = AtomicU64::new(0);
    static HIGH: AtomicU64 = AtomicU64::new(0);
    static HIGH_NS: AtomicU64 = AtomicU64::new(0);
    static PHASE_HIGH: AtomicU64 = AtomicU64::new(0);
    /// Phase marks: the phase's bits ([`memwall_core::timeline::Phase::to_bits`]), its end
    /// (ns), live bytes at its end and its high-water mark.
    pub const MARKS: usize = 4096;
    static MARK_PHASE: [AtomicU64; MARKS] = [const { AtomicU64::new(0) }; MARKS];
    static MARK_NS: [AtomicU64; MARKS] = [const { AtomicU64::new(0) }; MARKS];
    static MARK_BYTES: [AtomicU64; MARKS] = [const { AtomicU64::new(0) }; MARKS];
    static MARK_HIGH: [AtomicU64; MARKS] = [const { AtomicU64::new(0) }; MARKS];
    static MARK_LEN: AtomicUsize = AtomicUsize::new(0);

    /// Nanoseconds of the monotonic clock (no allocation).
    fn clock_ns() -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes the timespec it is given; CLOCK_MONOTONIC always exists.
        unsafe {
            libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
        }
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    fn push(t: u64, bytes: u64) {
        let i = LEN.fetch_add(1, Ordering::Relaxed);
        if i < CAPACITY {
            TIME_NS[i].store(t, Ordering::Relaxed);
            BYTES[i].store(bytes, Ordering::Relaxed);
            LAST.store(bytes, Ordering::Relaxed);
        } else {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Live bytes rose to `now`.
    #[inline]
    pub(super) fn rise(now: u64) {
        PHASE_HIGH.fetch_max(now, Ordering::Relaxed);
        let high = HIGH.fetch_max(now, Ordering::Relaxed);
        let t = if now > high {
            let t = clock_ns();
            HIGH_NS.store(t, Ordering::Relaxed);
            Some(t)
        } else {
            None
        };
        if now >= LAST.load(Ordering::Relaxed) + GRAIN.load(Ordering::Relaxed) {
            push(t.unwrap_or_else(clock_ns), now);
        }
    }

    /// Live bytes fell to `now`.
    #[inline]
    pub(super) fn fall(now: u64) {
        if now + GRAIN.load(Ordering::Relaxed) <= LAST.load(Ordering::Relaxed) {
            push(clock_ns(), now);
        }
    }

    /// Starts a trace from the bytes live now, recording changes of at least `grain_bytes`;
    /// returns the bytes live at its start.
    pub fn start(grain_bytes: u64) -> u64 {
        let now = CURRENT.load(Ordering::Relaxed);
        LEN.store(0, Ordering::Relaxed);
        MARK_LEN.store(0, Ordering::Relaxed);
        DROPPED.store(0, Ordering::Relaxed);
        GRAIN.store(grain_bytes.max(1), Ordering::Relaxed);
        HIGH.store(now, Ordering::Relaxed);
        PHASE_HIGH.store(now, Ordering::Relaxed);
        let t = clock_ns();
        START_NS.store(t, Ordering::Relaxed);
        HIGH_NS.store(t, Ordering::Relaxed);
        push(t, now);
        TRACING.store(true, Ordering::SeqCst);
        now
    }

    /// A phase boundary, the end of the phase `bits` (see
    /// [`memwall_core::timeline::Phase::to_bits`]): records the live bytes now with the
    /// high-water mark since the previous mark or the start, without allocating; the next
    /// phase's high-water mark starts from the bytes live now. Past [`MARKS`] marks, a mark
    /// merges into the last one.
    pub fn mark(bits: u64) {
        let len = MARK_LEN.load(Ordering::Relaxed);
        if len < MARKS {
            MARK_LEN.store(len + 1, Ordering::Relaxed);
            MARK_HIGH[len].store(0, Ordering::Relaxed);
            record_mark(len, bits);
        } else {
            record_mark(MARKS - 1, bits);
        }
    }

    /// Extends the last phase mark to now (what ran after it belongs to it); nothing without
    /// a mark.
    pub fn extend_last() {
        let len = MARK_LEN.load(Ordering::Relaxed);
        if len > 0 {
            record_mark(len - 1, MARK_PHASE[len - 1].load(Ordering::Relaxed));
        }
    }

    fn record_mark(i: usize, bits: u64) {
        let now = CURRENT.load(Ordering::Relaxed);
        let high = PHASE_HIGH.swap(now, Ordering::Relaxed).max(now);
        let t = clock_ns();
        push(t, now);
        MARK_PHASE[i].store(bits, Ordering::Relaxed);
        MARK_NS[i].store(t, Ordering::Relaxed);
        MARK_BYTES[i].store(now, Ordering::Relaxed);
        MARK_HIGH[i].fetch_max(high, Ordering::Relaxed);
    }

    fn seconds(t: u64) -> f64 {
        t.saturating_sub(START_NS.load(Ordering::Relaxed)) as f64 * 1e-9
    }

    /// A phase mark of a finished trace.
    #[derive(Debug, Clone, Copy, PartialEq)]
    pub struct Mark {
        /// The phase's bits.
        pub bits: u64,
        /// Its end, seconds since the start.
        pub end_s: f64,
        /// Live bytes at its end.
        pub bytes: u64,
        /// Its high-water mark (bytes).
        pub high: u64,
    }

    /// What a finished trace holds.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Trace {
        /// (seconds since the start, live bytes), in time order, the high included.
        pub points: Vec<(f64, u64)>,
        /// The phase marks, in order.
        pub marks: Vec<Mark>,
        /// The trace's high-water mark (bytes) and when it was first reached (seconds).
        pub high: (f64, u64),
        /// Points dropped past the buffer.
        pub dropped: u64,
    }

    /// Stops the trace and returns it (the copy allocates only after tracing stopped).
    pub fn stop() -> Trace {
        TRACING.store(false, Ordering::SeqCst);
        let marks = (0..MARK_LEN.load(Ordering::Relaxed).min(MARKS))
            .map(|i| Mark {
                bits: MARK_PHASE[i].load(Ordering::Relaxed),
                end_s: seconds(MARK_NS[i].load(Ordering::Relaxed)),
                bytes: MARK_BYTES[i].load(Ordering::Relaxed),
                high: MARK_HIGH[i].load(Ordering::Relaxed),
            })
            .collect();
        let len = LEN.load(Ordering::Relaxed).min(CAPACITY);
        let high = (
            seconds(HIGH_NS.load(Ordering::Relaxed)),
            HIGH.load(Ordering::Relaxed),
        );
        let mut points: Vec<(f64, u64)> = (0..len)
            .map(|i| {
                (
                    seconds(TIME_NS[i].load(Ordering::Relaxed)),
                    BYTES[i].load(Ordering::Relaxed),
                )
            })
            .collect();
        points.push(high);
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        Trace {
            points,
            marks,
            high,
            dropped: DROPPED.load(Ordering::Relaxed),
        }
    }
}
