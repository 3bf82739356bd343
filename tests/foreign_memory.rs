//! Arrays over another library's memory (`kiln_core::from_foreign`, what the Python front's
//! `from_numpy` shares a NumPy array through), from a user's point of view:
//!
//! 1. the values are read in place, and later writes by the owner are seen;
//! 2. kiln never writes into that memory: a move into an elementwise op, a compound assignment, a
//!    scatter, an in-place flip and a frozen function's replay (each of which writes a uniquely
//!    held kiln buffer in place) all leave the owner's bytes as they were;
//! 3. the owner is released exactly when the last kiln value over it goes;
//! 4. memory that compiled code cannot safely read in place (misaligned, short, empty, ending just
//!    before a page boundary) is refused with the reason, so the caller copies it.

mod common;
use common::leak_checked;
use kiln::prelude::*;
use kiln_core::alloc::ForeignMemory;
use kiln_core::VarType;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

/// A page-aligned region standing in for a NumPy array: `f32` values at a chosen byte offset of
/// memory the test also holds (`mem`), so that it can look at the bytes after kiln released them.
/// Dropping it counts a release.
struct Region {
    mem: Arc<Vec<AtomicU8>>,
    at: usize,
    bytes: usize,
    released: Arc<AtomicUsize>,
}

// SAFETY: `mem` is allocated once and never resized, moved or freed while the value lives (it
// holds an `Arc` of it); `at + bytes` lies inside it (checked in `region_at`).
unsafe impl ForeignMemory for Region {
    fn ptr(&self) -> *const u8 {
        self.mem.as_ptr().cast::<u8>().wrapping_add(self.at)
    }
    fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        self.released.fetch_add(1, Ordering::SeqCst);
    }
}

/// `values` written at byte `offset` past a page boundary inside fresh memory.
fn region_at(values: &[f32], offset: usize, released: &Arc<AtomicUsize>) -> Region {
    let mem: Vec<AtomicU8> = (0..values.len() * 4 + offset + 3 * 4096)
        .map(|_| AtomicU8::new(0))
        .collect();
    let base = mem.as_ptr() as usize;
    let at = base.next_multiple_of(4096) - base + offset;
    assert!(at + values.len() * 4 + 256 <= mem.len());
    for (i, v) in values.iter().enumerate() {
        write(&mem, at, i, *v);
    }
    Region {
        mem: Arc::new(mem),
        at,
        bytes: values.len() * 4,
        released: released.clone(),
    }
}

/// As [`region_at`], at an offset where kiln can read the values in place (the end is not within
/// 256 bytes of a page boundary).
fn region(values: &[f32], released: &Arc<AtomicUsize>) -> Region {
    let end = (64 + values.len() * 4) % 4096;
    let offset = if end > 0 && end <= 4096 - 256 {
        64
    } else {
        1024
    };
    region_at(values, offset, released)
}

/// The owner writes `v` as lane `i` of the values at byte `at`.
fn write(mem: &[AtomicU8], at: usize, i: usize, v: f32) {
    for (k, b) in v.to_ne_bytes().into_iter().enumerate() {
        mem[at + 4 * i + k].store(b, Ordering::SeqCst);
    }
}

/// The `f32`s the region's memory holds now.
fn owner_view(mem: &[AtomicU8], at: usize, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let b: [u8; 4] = std::array::from_fn(|k| mem[at + 4 * i + k].load(Ordering::SeqCst));
            f32::from_ne_bytes(b)
        })
        .collect()
}

/// A kiln array over `r` (panics if refused), the region's memory and where the values start.
fn share(r: Region, n: usize) -> (Float32, Arc<Vec<AtomicU8>>, usize) {
    let (mem, at) = (r.mem.clone(), r.at);
    let id = kiln_core::from_foreign(VarType::F32, n, Box::new(r)).expect("shareable");
    (Float32::from_id(id), mem, at)
}

/// Whether the owner's bytes still hold `want` (printing only the first difference).
fn unchanged(mem: &[AtomicU8], at: usize, want: &[f32]) -> Result<(), String> {
    let got = owner_view(mem, at, want.len());
    match got
        .iter()
        .zip(want)
        .position(|(a, b)| a.to_bits() != b.to_bits())
    {
        None => Ok(()),
        Some(i) => Err(format!("lane {i}: {} instead of {}", got[i], want[i])),
    }
}

fn values(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32 * 0.5 - 3.0).collect()
}

#[test]
fn values_are_read_in_place_and_owner_writes_are_seen() {
    leak_checked(|| {
        let released = Arc::new(AtomicUsize::new(0));
        for n in [1usize, 15, 16, 17, 1000, 1023, 1024, 1025] {
            let v = values(n);
            let (x, mem, at) = share(region(&v, &released), n);
            let start = mem.as_ptr() as usize + at;
            assert_eq!(x.buffer_addr(), Some(start), "n = {n}: not read in place");
            let y = &x * 2.0f32 + 1.0f32;
            let want: Vec<f32> = v.iter().map(|a| a * 2.0 + 1.0).collect();
            assert_eq!(y.to_vec(), want, "n = {n}");
            assert_eq!(x.sum().item(), v.iter().sum::<f32>(), "n = {n}");
            // the owner writes; a computation traced afterwards reads the new value
            write(&mem, at, n - 1, 100.0);
            assert_eq!((&x + 0.0f32).to_vec()[n - 1], 100.0, "n = {n}");
        }
        assert_eq!(released.load(Ordering::SeqCst), 8);
    })
}

#[test]
fn kiln_never_writes_into_shared_memory() {
    leak_checked(|| {
        kiln::with_inplace(true, || {
            let released = Arc::new(AtomicUsize::new(0));
            let n = 4096;
            let v = values(n);
            let before_reuses = kiln::stats().inplace_reuses;

            // a move into an elementwise op (a kiln buffer would be reused)
            let (x, mem, at) = share(region(&v, &released), n);
            let y = x + 1.0f32;
            assert_eq!(y.to_vec()[3], v[3] + 1.0);
            unchanged(&mem, at, &v).expect("an elementwise op wrote the owner's memory");
            drop(y);

            // compound assignment
            let (mut x, mem, at) = share(region(&v, &released), n);
            x += 5.0f32;
            assert_eq!(x.to_vec()[7], v[7] + 5.0);
            unchanged(&mem, at, &v).expect("`+=` wrote the owner's memory");
            drop(x);

            // scatter into it
            let (mut x, mem, at) = share(region(&v, &released), n);
            let idx = UInt32::from_vec(vec![0, 9, 4095]);
            kiln::scatter(&mut x, Float32::from_vec(vec![-1.0, -2.0, -3.0]), &idx);
            let got = x.to_vec();
            assert_eq!(
                (got[0], got[9], got[4095], got[1]),
                (-1.0, -2.0, -3.0, v[1])
            );
            unchanged(&mem, at, &v).expect("a scatter wrote the owner's memory");
            drop(x);

            // an in-place flip of a tensor over it
            let (x, mem, at) = share(region(&v, &released), n);
            let mut t = Tensor::from_array(x, &[64, 64]);
            t.flip_in_place(0);
            assert_eq!(t.to_vec()[0], v[63 * 64]);
            unchanged(&mem, at, &v).expect("an in-place flip wrote the owner's memory");
            drop(t);

            assert_eq!(
                kiln::stats().inplace_reuses,
                before_reuses,
                "a shared buffer was counted as reused"
            );
            assert_eq!(released.load(Ordering::SeqCst), 4);
        })
    })
}

#[derive(kiln::Traverse, Clone)]
struct State {
    x: Float32,
}

#[test]
fn frozen_replays_leave_shared_memory_alone() {
    leak_checked(|| {
        kiln::with_inplace(true, || {
            let released = Arc::new(AtomicUsize::new(0));
            let n = 2048;
            let v = values(n);
            let want: Vec<f32> = v.iter().map(|a| a * 0.5 + 1.0).collect();
            let mut f = kiln::freeze(|s: &mut State| {
                s.x = &s.x * 0.5f32 + 1.0f32;
            });
            for call in 0..4 {
                let (x, mem, at) = share(region(&v, &released), n);
                let mut s = State { x };
                f.call(&mut s).unwrap();
                unchanged(&mem, at, &v).unwrap_or_else(|e| panic!("call {call} wrote: {e}"));
                assert_eq!(s.x.to_vec(), want, "call {call}");
            }
            assert_eq!(f.stats().replays, 3, "{}", f.stats());
            assert_eq!(released.load(Ordering::SeqCst), 4);
        })
    })
}

#[test]
fn the_owner_is_released_with_the_last_value_over_it() {
    leak_checked(|| {
        let released = Arc::new(AtomicUsize::new(0));
        let (x, _, _) = share(region(&values(64), &released), 64);
        let view = x.clone();
        let lazy = &x * 3.0f32; // a pending expression reads it
        drop(x);
        drop(view);
        assert_eq!(released.load(Ordering::SeqCst), 0, "released while read");
        assert_eq!(lazy.to_vec()[2], values(64)[2] * 3.0);
        drop(lazy);
        kiln::sync().unwrap();
        assert_eq!(released.load(Ordering::SeqCst), 1, "not released");
    })
}

#[test]
fn memory_that_cannot_be_read_in_place_is_refused_with_the_reason() {
    leak_checked(|| {
        let released = Arc::new(AtomicUsize::new(0));
        let try_share = |offset: usize, n: usize, claim: usize| {
            let r = region_at(&values(n), offset, &released);
            kiln_core::from_foreign(VarType::F32, claim, Box::new(r))
        };
        // misaligned for f32
        let e = try_share(2, 8, 8).unwrap_err();
        assert!(e.contains("multiple of the element size"), "{e}");
        // fewer bytes than the elements need
        let e = try_share(0, 8, 9).unwrap_err();
        assert!(e.contains("fewer bytes"), "{e}");
        // empty
        let e = try_share(0, 0, 0).unwrap_err();
        assert!(e.contains("empty"), "{e}");
        // ending 64 bytes before a page boundary (a vector read past the end could cross it)
        let e = try_share(4096 - 64 - 40, 10, 10).unwrap_err();
        assert!(e.contains("page boundary"), "{e}");
        // ending exactly on one
        let e = try_share(4096 - 40, 10, 10).unwrap_err();
        assert!(e.contains("page boundary"), "{e}");
        // 252 bytes before one (a multiple of 4, one element short of the margin): refused
        let e = try_share(4096 - 252 - 40, 10, 10).unwrap_err();
        assert!(e.contains("page boundary"), "{e}");
        // 256 bytes before one is fine
        let id = try_share(4096 - 256 - 40, 10, 10).expect("256 bytes of room");
        assert_eq!(Float32::from_id(id).to_vec(), values(10));
        // every refused region was released at once
        assert_eq!(released.load(Ordering::SeqCst), 7);
    })
}

/// An owner whose release calls back into kiln (as a NumPy array viewing a kiln buffer does when
/// it drops its kiln handle).
struct Reentrant {
    inner: Region,
    on_drop: Option<Float32>,
}

// SAFETY: as `Region`'s, whose memory it forwards.
unsafe impl ForeignMemory for Reentrant {
    fn ptr(&self) -> *const u8 {
        self.inner.ptr()
    }
    fn bytes(&self) -> usize {
        self.inner.bytes()
    }
}

impl Drop for Reentrant {
    fn drop(&mut self) {
        // a kiln handle dropped and an expression traced while the owner goes (no read: the
        // owner may go during a frozen function's recording, where reads are refused)
        drop(self.on_drop.take());
        drop(Float32::from_vec(vec![1.0, 2.0]) * 2.0f32);
    }
}

#[test]
fn an_owner_whose_release_calls_into_kiln_does_not_deadlock() {
    leak_checked(|| {
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let worker = std::thread::spawn(move || {
            let released = Arc::new(AtomicUsize::new(0));
            for round in 0..40 {
                let n = 64 + round * 37;
                let v = values(n);
                let owner = Reentrant {
                    inner: region(&v, &released),
                    on_drop: Some(Float32::from_vec(vec![round as f32; 3]) * 2.0f32),
                };
                let id = kiln_core::from_foreign(VarType::F32, n, Box::new(owner)).unwrap();
                let x = Float32::from_id(id);
                // the last holders go in different ways: a handle, a pending expression evaluated,
                // an in-place candidate, a scatter's target, a frozen function's argument
                match round % 5 {
                    0 => drop(x),
                    3 => {
                        let mut x = x;
                        kiln::scatter(
                            &mut x,
                            Float32::from_vec(vec![9.0]),
                            &UInt32::from_vec(vec![0]),
                        );
                        assert_eq!(x.to_vec()[0], 9.0);
                    }
                    4 => {
                        let mut f = kiln::freeze(|s: &mut State| {
                            s.x = &s.x * 0.5f32;
                        });
                        let mut s = State { x };
                        f.call(&mut s).unwrap();
                        assert_eq!(s.x.to_vec()[1], v[1] * 0.5);
                    }
                    1 => {
                        let y = &x * 2.0f32;
                        drop(x);
                        assert_eq!(y.to_vec()[1], v[1] * 2.0);
                    }
                    _ => {
                        let y = x + 1.0f32;
                        assert_eq!(y.to_vec()[0], v[0] + 1.0);
                    }
                }
            }
            kiln::sync().unwrap();
            done_tx.send(released.load(Ordering::SeqCst)).unwrap();
        });
        match done_rx.recv_timeout(std::time::Duration::from_secs(60)) {
            Ok(released) => assert_eq!(released, 40),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("a foreign owner's release deadlocked the engine")
            }
            Err(_) => std::panic::resume_unwind(worker.join().expect_err("the worker failed")),
        }
    })
}

#[test]
fn memory_already_read_by_a_kiln_array_gets_no_second_name() {
    // (a frozen recording tells inputs apart by buffer address: two arrays over one memory would
    // be read as one)
    leak_checked(|| {
        let released = Arc::new(AtomicUsize::new(0));
        let v = values(1000);
        let r = region(&v, &released);
        let (mem, at) = (r.mem.clone(), r.at);
        let id = kiln_core::from_foreign(VarType::F32, 1000, Box::new(r)).unwrap();
        let x = Float32::from_id(id);
        // the same memory as the same array: that array again
        let again = Region {
            mem: mem.clone(),
            at,
            bytes: 4000,
            released: released.clone(),
        };
        let id2 = kiln_core::from_foreign(VarType::F32, 1000, Box::new(again)).unwrap();
        assert_eq!(id2, x.id(), "not the same array");
        let y = Float32::from_id(id2);
        // a part of it, or the same bytes as another type: refused (the caller copies)
        for (off, n, ty) in [(400usize, 100usize, VarType::F32), (0, 1000, VarType::I32)] {
            let part = Region {
                mem: mem.clone(),
                at: at + off,
                bytes: 4 * n,
                released: released.clone(),
            };
            let e = kiln_core::from_foreign(ty, n, Box::new(part)).unwrap_err();
            assert!(e.contains("already reads part"), "{e}");
        }
        assert_eq!(
            released.load(Ordering::SeqCst),
            3,
            "the refused owners were kept"
        );
        assert_eq!((&x + &y).to_vec()[1], 2.0 * v[1]);
        drop((x, y));
        kiln::sync().unwrap();
        assert_eq!(released.load(Ordering::SeqCst), 4);
    })
}
