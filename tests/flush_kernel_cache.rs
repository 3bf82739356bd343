//! `kiln::engine::flush_kernel_cache`: the compiled kernels leave memory and frozen functions
//! record again. In a test binary of its own: the flush is process-wide, and tests running beside
//! it in one binary would see their recordings dropped.

mod common;
use kiln::prelude::*;

#[test]
fn flushing_the_kernel_cache_records_frozen_functions_again() {
    common::leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32| x * 3.0f32 + 1.0f32);
        let x = Float32::from_slice(&[1.0, 2.0]);
        f.call(&x).unwrap();
        f.call(&x).unwrap();
        let kept = kiln_core::cache::len();
        assert!(kept >= 1);
        kiln::engine::flush_kernel_cache();
        assert_eq!(kiln_core::cache::len(), 0);
        assert_eq!(f.call(&x).unwrap().to_vec(), vec![4.0, 7.0]);
        assert_eq!(f.call(&x).unwrap().to_vec(), vec![4.0, 7.0]);
        assert_eq!((f.stats().recordings, f.stats().replays), (2, 2));
        // plain evaluations compile (or load from disk) again and still compute
        assert_eq!((&x * 5.0f32).to_vec(), vec![5.0, 10.0]);
    });
}
