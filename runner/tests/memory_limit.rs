//! The counting allocator's memory limit (`memwall_runner::measure::set_limit`): the CPU
//! stand-in for a device of that size. One test in its own binary, so that no other test's
//! allocations run under the limit.

use memwall_runner::measure::{allocated_bytes, limit, set_limit};

/// A block that would take the live bytes past the limit is refused and not counted; a small
/// one under it is served; without the limit the large block is served again.
#[test]
fn a_block_past_the_limit_is_refused_and_not_counted() {
    let live = allocated_bytes();
    set_limit(Some(live + (4 << 20)));
    assert_eq!(limit(), Some(live + (4 << 20)));
    // Each vector goes through `black_box` after its request: a block nothing reads may be
    // elided by the optimizer, which then assumes it was served (LLVM removes unused
    // allocations; a build with fewer codegen units, as CI's, did so here).
    let mut big: Vec<u8> = Vec::new();
    let refused = big.try_reserve_exact(256 << 20);
    std::hint::black_box(&mut big);
    let mut small: Vec<u8> = Vec::new();
    let served = small.try_reserve_exact(64 << 10);
    std::hint::black_box(&mut small);
    let live_after = allocated_bytes();
    set_limit(None);
    assert!(
        refused.is_err(),
        "a 256 MiB block past a 4 MiB limit was served"
    );
    assert!(served.is_ok(), "a 64 KiB block under the limit was refused");
    assert!(
        live_after < live + (4 << 20),
        "the refused block was counted as live ({live_after} bytes live, {live} before)"
    );
    assert_eq!(limit(), None);
    let served_again = big.try_reserve_exact(256 << 20);
    std::hint::black_box(&mut big);
    assert!(served_again.is_ok(), "no limit, yet the block was refused");
}
