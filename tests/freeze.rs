//! Function freezing from a user's point of view: the seed document's examples one to one (each
//! asserting its counts of recordings, replays and re-traces), replays equal to unfrozen runs bit
//! for bit, `&mut` arguments, struct inputs, leaks, and every error.

mod common;
use common::leak_checked;
use kiln::prelude::*;
use kiln::{ReduceOp, Size, Traverse};

/// The seed's introduction: `y = x + 1; eval(y); z = x * 2`.
#[test]
fn records_once_then_replays() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32| -> Float32 {
            let y = x + 1.0;
            y.eval();
            x * 2.0
        });
        for i in 0..5 {
            let x = Float32::arange(8) + i as f32;
            let z = f.call(&x).unwrap();
            let want: Vec<f32> = (0..8).map(|k| (k + i) as f32 * 2.0).collect();
            assert_eq!(z.to_vec(), want);
        }
        let s = f.stats();
        assert_eq!(
            (s.recordings, s.replays, s.retraces.len()),
            (1, 4, 0),
            "{s}"
        );
    });
}

/// Replays run no tracing and no compilation: only launches.
#[test]
fn replay_does_not_compile_or_trace() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32| -> Float32 { (x * x + 1.0).sqrt() });
        let x = Float32::arange(100);
        f.call(&x).unwrap();
        let before = kiln::stats();
        let y = f.call(&x).unwrap();
        let after = kiln::stats();
        assert_eq!(after.kernels_compiled, before.kernels_compiled);
        assert_eq!(
            after.cache_hits + after.cache_misses,
            before.cache_hits + before.cache_misses
        );
        assert_eq!(after.launches, before.launches + 1);
        assert_eq!(y.to_vec()[3], 10f32.sqrt());
    });
}

/// Seed "Dry Run Replay": block reduce of 4 then 5 elements. kiln's `block_sum` reduces a partial
/// last block, so the second call replays instead of re-tracing.
#[test]
fn block_reduce_size_4_then_5_replays() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32| -> Float32 { x.block_sum(2) });
        assert_eq!(
            f.call(&Float32::arange(4)).unwrap().to_vec(),
            vec![1.0, 5.0]
        );
        assert_eq!(
            f.call(&Float32::arange(5)).unwrap().to_vec(),
            vec![1.0, 5.0, 4.0]
        );
        let s = f.stats();
        assert_eq!(
            (s.recordings, s.replays, s.retraces.len()),
            (1, 1, 0),
            "{s}"
        );
    });
}

/// Seed: a prefix sum after a block reduction (Dr.Jit always re-traces this one).
#[test]
fn prefix_sum_after_block_reduce_replays() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32| -> Float32 { x.block_sum(2).prefix_sum(false) });
        for _ in 0..2 {
            let y = f.call(&Float32::arange(4)).unwrap();
            assert_eq!(y.to_vec(), vec![1.0, 6.0]);
        }
        let y = f.call(&Float32::arange(7)).unwrap();
        assert_eq!(y.to_vec(), vec![1.0, 6.0, 15.0, 21.0]);
        let s = f.stats();
        assert_eq!(
            (s.recordings, s.replays, s.retraces.len()),
            (1, 2, 0),
            "{s}"
        );
    });
}

/// Seed "Kernel Size Inference", written with `x.size()`: replays at any width.
#[test]
fn half_width_with_size_replays_at_any_width() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32| -> Float32 {
            kiln::gather(x, &UInt32::arange(x.size() / 2))
        });
        for n in [8usize, 16, 10, 6, 3, 2] {
            let y = f.call(&Float32::arange(n)).unwrap();
            let want: Vec<f32> = (0..n / 2).map(|k| k as f32).collect();
            assert_eq!(y.to_vec(), want, "width {n}");
        }
        // even widths where the half is 1 replay: nothing in this trace depended on it
        let s = f.stats();
        assert_eq!((s.recordings, s.replays), (1, 5), "{s}");
    });
}

/// The same written with `x.len()`: a plain integer is a constant of the recording, so each new
/// width records anew (never a wrong replay), and the same width replays.
#[test]
fn half_width_with_len_records_per_width() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32| -> Float32 {
            kiln::gather(x, &UInt32::arange(x.len() / 2))
        });
        for n in [8usize, 16, 8, 16] {
            let y = f.call(&Float32::arange(n)).unwrap();
            assert_eq!(y.len(), n / 2);
            assert_eq!(y.to_vec()[n / 2 - 1], (n / 2 - 1) as f32);
        }
        let s = f.stats();
        assert_eq!(
            (s.recordings, s.replays, s.retraces.len()),
            (2, 2, 1),
            "{s}"
        );
    });
}

/// Seed: `width - 1`, which Dr.Jit replays with an undefined result. With `x.size() - 1` kiln
/// replays it exactly; with `x.len() - 1` it records anew.
#[test]
fn width_minus_one_is_exact() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32| -> Float32 {
            kiln::gather(x, &(UInt32::arange(x.size() - 1) + 1))
        });
        for n in [8usize, 16, 5, 9] {
            let y = f.call(&Float32::arange(n)).unwrap();
            let want: Vec<f32> = (1..n).map(|k| k as f32).collect();
            assert_eq!(y.to_vec(), want);
        }
        assert_eq!((f.stats().recordings, f.stats().replays), (1, 3));

        let mut g = kiln::freeze(|x: &Float32| -> Float32 {
            kiln::gather(x, &(UInt32::arange(x.len() - 1) + 1))
        });
        for n in [8usize, 16] {
            assert_eq!(g.call(&Float32::arange(n)).unwrap().len(), n - 1);
        }
        assert_eq!((g.stats().recordings, g.stats().replays), (2, 0));
    });
}

/// A size expression that is invalid for new inputs (underflow) re-traces and overwrites the
/// recording rather than adding one.
#[test]
fn invalid_size_retraces_and_overwrites() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32| -> Float32 {
            let n = x.size();
            if n.peek() >= 4 {
                kiln::gather(x, &UInt32::arange(n - 4))
            } else {
                x * 1.0
            }
        });
        assert_eq!(f.call(&Float32::arange(6)).unwrap().len(), 2);
        assert_eq!(f.call(&Float32::arange(2)).unwrap().len(), 2); // 2 - 4 underflows: re-trace
        assert_eq!(f.call(&Float32::arange(3)).unwrap().len(), 3);
        let s = f.stats();
        assert_eq!((s.recordings, s.replays), (2, 1), "{s}");
        assert!(s.retraces[0].contains("invalid"), "{s}");
    });
}

/// Seed "Excessive Recordings": a changing literal seed is made opaque after one extra recording.
#[test]
fn changing_literal_is_made_opaque_after_one_extra_recording() {
    leak_checked(|| {
        let mut f =
            kiln::freeze(|x: &Float32, seed: &UInt32| -> Float32 { x + seed.cast::<f32>() });
        let x = Float32::zeros(4);
        for i in 0..10u32 {
            let y = f.call(&x, &UInt32::from(i)).unwrap();
            assert_eq!(y.to_vec(), vec![i as f32; 4]);
        }
        let s = f.stats();
        assert_eq!(
            (s.recordings, s.replays, s.retraces.len()),
            (2, 8, 1),
            "{s}"
        );
        assert!(s.retraces[0].contains("arg1"), "{s}");
    });
}

/// The same with `make_opaque` beforehand: one recording.
#[test]
fn opaque_seed_needs_one_recording() {
    leak_checked(|| {
        let mut f =
            kiln::freeze(|x: &Float32, seed: &UInt32| -> Float32 { x + seed.cast::<f32>() });
        let x = Float32::zeros(4);
        for i in 0..10u32 {
            let seed = kiln::make_opaque(&UInt32::from(i));
            assert_eq!(f.call(&x, &seed).unwrap().to_vec(), vec![i as f32; 4]);
        }
        let s = f.stats();
        assert_eq!((s.recordings, s.replays), (1, 9), "{s}");
    });
}

/// Without auto_opaque each literal value gets its own recording.
#[test]
fn literal_values_key_recordings_without_auto_opaque() {
    leak_checked(|| {
        let mut f =
            kiln::freeze(|x: &Float32, seed: &UInt32| -> Float32 { x + seed.cast::<f32>() })
                .auto_opaque(false);
        let x = Float32::zeros(2);
        for i in [1u32, 2, 1, 2] {
            assert_eq!(
                f.call(&x, &UInt32::from(i)).unwrap().to_vec(),
                vec![i as f32; 2]
            );
        }
        assert_eq!((f.stats().recordings, f.stats().replays), (2, 2));
    });
}

/// Seed "Hidden Inputs": an evaluated array captured by the closure is an error naming it and both
/// fixes; `.with_state` makes it part of the frozen state.
#[test]
fn hidden_input_is_an_error_and_with_state_fixes_it() {
    leak_checked(|| {
        let hidden = Float32::from_slice(&[1.0, 2.0, 3.0]).label("hidden_y");
        let h = hidden.clone();
        let mut f = kiln::freeze(move |x: &Float32| -> Float32 { x + &h });
        let err = f.call(&Float32::ones(3)).unwrap_err().to_string();
        assert!(
            err.contains("hidden_y") && err.contains("pass it as an argument"),
            "{err}"
        );
        assert!(err.contains("with_state"), "{err}");
        assert_eq!(f.stats().recordings, 0);
        drop(f);

        let h = hidden.clone();
        let state = hidden.clone();
        let mut g = kiln::freeze(move |x: &Float32| -> Float32 { x + &h })
            .with_state(move |_| state.clone());
        for _ in 0..3 {
            assert_eq!(
                g.call(&Float32::ones(3)).unwrap().to_vec(),
                vec![2.0, 3.0, 4.0]
            );
        }
        assert_eq!((g.stats().recordings, g.stats().replays), (1, 2));
    });
}

/// with_state receives the arguments (the seed's `state_fn = lambda input: input.y`).
#[test]
fn with_state_sees_the_arguments() {
    leak_checked(|| {
        #[derive(Traverse)]
        struct PartiallyHidden {
            x: Float32,
            #[traverse(skip)]
            y: Float32,
        }
        let mut f = kiln::freeze(|p: &PartiallyHidden| -> Float32 { &p.x + &p.y })
            .with_state(|(p,)| p.y.clone());
        for k in 0..3 {
            let p = PartiallyHidden {
                x: Float32::full(k as f32, 2),
                y: Float32::from_slice(&[10.0, 20.0]),
            };
            let p = PartiallyHidden {
                x: kiln::make_opaque(&p.x),
                y: p.y,
            };
            assert_eq!(
                f.call(&p).unwrap().to_vec(),
                vec![10.0 + k as f32, 20.0 + k as f32]
            );
        }
        assert_eq!((f.stats().recordings, f.stats().replays), (1, 2));
    });
}

/// Reading an array's contents inside is an `Err` naming it; nothing is recorded.
#[test]
fn reads_are_refused() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32| -> Float32 {
            if x.to_vec()[1] > 0.0 {
                x + 1.0
            } else {
                x - 1.0
            }
        });
        let x = Float32::from_slice(&[0.0, 1.0]).label("x_in");
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let err = f.call(&x).unwrap_err();
        std::panic::set_hook(prev);
        let msg = err.to_string();
        assert!(
            msg.contains("x_in") && msg.contains("frozen function"),
            "{msg}"
        );
        assert_eq!(f.stats().recordings, 0);
        // try_ variants return the error to the function itself
        let mut g = kiln::freeze(|x: &Float32| -> Float32 {
            match x.sum().try_item() {
                Ok(_) => x.clone(),
                Err(_) => x * 0.0,
            }
        });
        assert!(g
            .call(&x)
            .unwrap_err()
            .to_string()
            .contains("frozen function"));
    });
}

/// A scatter into a `&mut` input happens again on replay, to the caller's array; a clone taken
/// before the call and an unevaluated expression of the input keep their old values.
#[test]
fn scatter_into_mut_argument_on_replay() {
    leak_checked(|| {
        let mut f = kiln::freeze(|t: &mut Float32, v: &Float32| {
            kiln::scatter(t, v, &UInt32::arange(v.size()));
        });
        for round in 0..3 {
            let mut t = Float32::from_slice(&[0.0; 4]);
            let clone = t.clone();
            let expr = &t + 1.0;
            let v = Float32::from_slice(&[5.0 + round as f32, 6.0]);
            f.call(&mut t, &v).unwrap();
            assert_eq!(t.to_vec(), vec![5.0 + round as f32, 6.0, 0.0, 0.0]);
            assert_eq!(clone.to_vec(), vec![0.0; 4]);
            assert_eq!(expr.to_vec(), vec![1.0; 4]);
        }
        // and without anyone else watching: in place
        for _ in 0..2 {
            let mut t = Float32::from_slice(&[0.0; 3]);
            f.call(&mut t, &Float32::from_slice(&[9.0])).unwrap();
            assert_eq!(t.to_vec(), vec![9.0, 0.0, 0.0]);
        }
        assert!(f.stats().replays >= 3, "{}", f.stats());
    });
}

/// A `&mut` argument that is a literal (`zeros`) is evaluated inside the function; the replay hands
/// the caller a new array each time, never the shared constant.
#[test]
fn scatter_into_literal_mut_argument() {
    leak_checked(|| {
        let mut f = kiln::freeze(|t: &mut UInt32, i: &UInt32| {
            kiln::scatter_reduce(ReduceOp::Add, t, 1u32, i);
        });
        for round in 0..3u32 {
            let mut t = UInt32::zeros(4);
            let other_zeros = UInt32::zeros(4);
            f.call(&mut t, &UInt32::from_slice(&[round % 4, 3, 3]))
                .unwrap();
            let mut want = vec![0u32; 4];
            want[(round % 4) as usize] += 1;
            want[3] += 2;
            assert_eq!(t.to_vec(), want, "round {round}");
            assert_eq!(other_zeros.to_vec(), vec![0; 4]);
        }
        assert_eq!((f.stats().recordings, f.stats().replays), (1, 2));
    });
}

/// Changing the structure or a plain value of a `&mut` argument cannot be replayed: an error.
#[test]
fn mut_argument_structure_change_is_an_error() {
    leak_checked(|| {
        let mut f = kiln::freeze(|v: &mut Vec<Float32>| {
            let first = v[0].clone();
            v.push(first);
        });
        let mut v = vec![Float32::ones(2)];
        let err = f.call(&mut v).unwrap_err().to_string();
        assert!(err.contains("`&mut` argument"), "{err}");
        assert_eq!(f.stats().recordings, 0);
    });
}

/// Scatter-reduce and gather inside a frozen function, at several sizes.
#[test]
fn scatter_reduce_and_gather_inside() {
    leak_checked(|| {
        let mut hist = kiln::freeze(|idx: &UInt32, bins: &UInt32| -> UInt32 {
            let mut h = UInt32::zeros(bins.size());
            kiln::scatter_reduce(ReduceOp::Add, &mut h, 1u32, idx);
            kiln::gather(&h, &UInt32::arange(bins.size()))
        });
        for n in [10usize, 37, 1000] {
            let idx = UInt32::arange(n) % 4;
            let bins = UInt32::zeros(4);
            let h = hist.call(&idx, &kiln::make_opaque(&bins)).unwrap().to_vec();
            let want: Vec<u32> = (0..4)
                .map(|b| (0..n).filter(|i| i % 4 == b).count() as u32)
                .collect();
            assert_eq!(h, want, "n = {n}");
        }
        assert_eq!(hist.stats().recordings, 1, "{}", hist.stats());
    });
}

#[derive(Traverse, Clone)]
struct Layer {
    w: Float32,
    b: Option<Float32>,
}
#[derive(Traverse, Clone)]
struct Net {
    layers: Vec<Layer>,
    scale: f32,
}

/// A struct input with nested `Vec` and `Option`; its plain scalar is part of the key.
#[test]
fn struct_with_vec_and_option() {
    leak_checked(|| {
        let mut f = kiln::freeze(|net: &Net, x: &Float32| -> (Float32, Float32) {
            let mut y = x.clone();
            for l in &net.layers {
                y = &y * &l.w;
                if let Some(b) = &l.b {
                    y += b;
                }
            }
            let s = &y * net.scale;
            (y, s)
        });
        let net = |scale: f32| Net {
            layers: vec![
                Layer {
                    w: Float32::from_slice(&[2.0, 2.0]),
                    b: None,
                },
                Layer {
                    w: Float32::from_slice(&[1.0, 3.0]),
                    b: Some(Float32::from_slice(&[1.0, 1.0])),
                },
            ],
            scale,
        };
        let x = Float32::from_slice(&[1.0, 2.0]);
        for _ in 0..3 {
            let (y, s) = f.call(&net(2.0), &x).unwrap();
            assert_eq!(y.to_vec(), vec![3.0, 13.0]);
            assert_eq!(s.to_vec(), vec![6.0, 26.0]);
        }
        let (_, s) = f.call(&net(0.5), &x).unwrap();
        assert_eq!(s.to_vec(), vec![1.5, 6.5]);
        assert_eq!((f.stats().recordings, f.stats().replays), (2, 2));
    });
}

/// Outputs that are inputs come back as the same arrays; duplicated inputs are one slot.
#[test]
fn outputs_that_are_inputs_are_the_same_arrays() {
    leak_checked(|| {
        let mut f =
            kiln::freeze(|a: &Float32, b: &Float32| -> (Float32, Float32) { (a.clone(), a + b) });
        let a = Float32::from_slice(&[1.0, 2.0]);
        for _ in 0..2 {
            let (a2, s) = f.call(&a, &a).unwrap();
            assert_eq!(a2.id(), a.id());
            assert_eq!(s.to_vec(), vec![2.0, 4.0]);
        }
        assert_eq!(f.stats().replays, 1);
    });
}

/// Dropping the frozen function frees everything it kept.
#[test]
fn no_leaks_after_drop() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32| -> (Float32, UInt32, Float32) {
            let m = x.gt(Float32::scalar(0.5));
            let idx = m.compress();
            (kiln::gather(x, &idx), idx, Float32::zeros(x.size()))
        });
        for n in [4usize, 9, 4] {
            let x = Float32::linspace(0.0, 1.0, n);
            let (g, idx, z) = f.call(&x).unwrap();
            let want: Vec<f32> = x.to_vec().into_iter().filter(|&v| v > 0.5).collect();
            assert_eq!(g.to_vec(), want);
            assert_eq!(idx.len(), want.len());
            assert_eq!(z.len(), n);
        }
        assert_eq!(f.stats().recordings, 1, "{}", f.stats());
    });
}

/// `.limit`, `.enabled(false)` and nested frozen calls.
#[test]
fn limits_switches_and_nesting() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32, k: &u32| -> Float32 { x * *k as f32 }).limit(2);
        let x = Float32::ones(2);
        for k in 0..5u32 {
            assert_eq!(f.call(&x, &k).unwrap().to_vec(), vec![k as f32; 2]);
        }
        assert_eq!((f.stats().recordings, f.stats().unfrozen), (2, 3));

        let mut off = kiln::freeze(|x: &Float32| -> Float32 { x + 1.0 }).enabled(false);
        off.call(&x).unwrap();
        assert_eq!(off.stats().recordings, 0);

        let mut inner = kiln::freeze(|x: &Float32| -> Float32 { x * 3.0 });
        let mut outer =
            kiln::freeze(move |x: &Float32| -> Float32 { inner.call(x).unwrap() + 1.0 });
        for _ in 0..3 {
            assert_eq!(outer.call(&x).unwrap().to_vec(), vec![4.0, 4.0]);
        }
        assert_eq!((outer.stats().recordings, outer.stats().replays), (1, 2));
    });
}

/// Sizes of classes 0 and 1 trace differently (broadcasting): they are part of the key, so a
/// size-1 input records separately and both replay correctly.
#[test]
fn broadcast_sizes_record_separately() {
    leak_checked(|| {
        let mut f = kiln::freeze(|a: &Float32, b: &Float32| -> Float32 { a + b });
        let cases = [(4usize, 4usize), (4, 1), (7, 7), (1, 5), (5, 1)];
        for (n, m) in cases {
            let a = Float32::arange(n);
            let b = Float32::arange(m) * 10.0;
            let y = f.call(&a, &b).unwrap();
            let len = n.max(m);
            let want: Vec<f32> = (0..len)
                .map(|i| {
                    (if n == 1 { 0 } else { i }) as f32 + 10.0 * (if m == 1 { 0 } else { i }) as f32
                })
                .collect();
            assert_eq!(y.to_vec(), want, "{n} {m}");
        }
        assert_eq!(f.stats().recordings, 3, "{}", f.stats());
        // unequal sizes are the same error frozen or not
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let prev = std::panic::take_hook();
            std::panic::set_hook(Box::new(|_| {}));
            let r = f.call(&Float32::arange(3), &Float32::arange(4));
            std::panic::set_hook(prev);
            r
        }));
        assert!(err.is_err());
    });
}

/// `Size` arithmetic is accepted by constructors.
#[test]
fn size_arithmetic_in_constructors() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32| -> (Float32, UInt32, Float32) {
            let n = x.size();
            (
                Float32::full(2.0, n.div_ceil(4)),
                UInt32::arange((n * 2).min(Size::fixed(10))),
                Float32::zeros(n + 1),
            )
        });
        for n in [3usize, 8, 20] {
            let (a, b, c) = f.call(&Float32::arange(n)).unwrap();
            assert_eq!(a.len(), n.div_ceil(4));
            assert_eq!(b.len(), (2 * n).min(10));
            assert_eq!(c.len(), n + 1);
        }
        assert_eq!(f.stats().recordings, 1, "{}", f.stats());
    });
}

/// The body shared by the frozen and the unfrozen run of the random-call test.
fn mixed_body(x: &Float32, y: &Float32, seed: &UInt32) -> (Float32, Float32, UInt32, Float32) {
    let n = x.size();
    let z = (x * y + 1.0).sqrt() * seed.cast::<f32>();
    z.eval();
    let half = kiln::gather(&z, &(UInt32::arange(n / 2) * 2));
    let blocks = z.block_sum(16).prefix_sum(true);
    let mut hist = UInt32::zeros(Size::fixed(8));
    kiln::scatter_reduce(ReduceOp::Add, &mut hist, 1u32, &(x.cast::<u32>() % 8));
    let picked = kiln::gather(x, &x.gt(Float32::scalar(50.0)).compress());
    let total = &half.sum() + &picked.sum();
    (blocks, total, hist, picked)
}

fn bits(v: Vec<f32>) -> Vec<u32> {
    v.into_iter().map(f32::to_bits).collect()
}

/// 100 calls with random sizes and values: every replay equals the unfrozen run bit for bit, and
/// at least 90 of the calls replay.
#[test]
fn random_calls_match_unfrozen_bit_for_bit() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32, y: &Float32, seed: &UInt32| mixed_body(x, y, seed));
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let sizes = [
            2usize, 5, 16, 17, 31, 100, 1000, 16_383, 16_384, 16_385, 40_000,
        ];
        for call in 0..100 {
            let n = match call {
                50 => 1,
                70 => 0,
                _ => sizes[(next() % sizes.len() as u64) as usize],
            };
            let xs: Vec<f32> = (0..n).map(|_| (next() % 10_000) as f32 / 100.0).collect();
            let ys: Vec<f32> = (0..n).map(|_| (next() % 1000) as f32 / 10.0).collect();
            let (x, y) = (Float32::from_vec(xs), Float32::from_vec(ys));
            let seed = UInt32::opaque((next() % 100) as u32);
            let (a, b, c, d) = f.call(&x, &y, &seed).unwrap();
            let (ea, eb, ec, ed) = mixed_body(&x, &y, &seed);
            assert_eq!(bits(a.to_vec()), bits(ea.to_vec()), "call {call}, n = {n}");
            assert_eq!(bits(b.to_vec()), bits(eb.to_vec()), "call {call}, n = {n}");
            assert_eq!(c.to_vec(), ec.to_vec(), "call {call}, n = {n}");
            assert_eq!(bits(d.to_vec()), bits(ed.to_vec()), "call {call}, n = {n}");
        }
        let s = f.stats();
        assert!(s.replays >= 90, "{s}");
        assert_eq!(s.recordings + s.replays, 100, "{s}");
    });
}

mod size_expressions {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Copy, Debug)]
    enum SizeOp {
        Add(usize),
        Sub(usize),
        Mul(usize),
        Div(usize),
        DivCeil(usize),
        Min(usize),
        Max(usize),
    }

    fn op() -> impl Strategy<Value = SizeOp> {
        (0..7u8, 1..6usize).prop_map(|(k, v)| match k {
            0 => SizeOp::Add(v),
            1 => SizeOp::Sub(v),
            2 => SizeOp::Mul(v),
            3 => SizeOp::Div(v),
            4 => SizeOp::DivCeil(v),
            5 => SizeOp::Min(v * 20),
            _ => SizeOp::Max(v * 3),
        })
    }

    fn on_size(ops: &[SizeOp], n: Size) -> Size {
        ops.iter().fold(n, |s, op| match *op {
            SizeOp::Add(v) => s + v,
            SizeOp::Sub(v) => s - v,
            SizeOp::Mul(v) => s * v,
            SizeOp::Div(v) => s / v,
            SizeOp::DivCeil(v) => s.div_ceil(v),
            SizeOp::Min(v) => s.min(v),
            SizeOp::Max(v) => s.max(v),
        })
    }

    fn on_usize(ops: &[SizeOp], n: usize) -> Option<usize> {
        ops.iter().try_fold(n, |s, op| match *op {
            SizeOp::Add(v) => s.checked_add(v),
            SizeOp::Sub(v) => s.checked_sub(v),
            SizeOp::Mul(v) => s.checked_mul(v),
            SizeOp::Div(v) => Some(s / v),
            SizeOp::DivCeil(v) => Some(s.div_ceil(v)),
            SizeOp::Min(v) => Some(s.min(v)),
            SizeOp::Max(v) => Some(s.max(v)),
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// A size computed from `x.size()` by any chain of `Size` arithmetic replays exactly at other
        /// widths; one that is invalid there (underflow) re-traces, and the user's code then fails
        /// as it would unfrozen.
        #[test]
        fn size_arithmetic_replays_exactly(
            ops in proptest::collection::vec(op(), 1..6),
            n1 in 2..300usize,
            n2 in 2..300usize,
        ) {
            let first = on_usize(&ops, n1);
            prop_assume!(first.is_some());
            leak_checked(|| {
                let ops2 = ops.clone();
                let mut f = kiln::freeze(move |x: &Float32| -> UInt32 {
                    UInt32::arange(on_size(&ops2, x.size()))
                });
                let y = f.call(&Float32::zeros(n1)).unwrap();
                assert_eq!(y.len(), first.unwrap());
                match on_usize(&ops, n2) {
                    Some(want) => {
                        let y = f.call(&Float32::zeros(n2)).unwrap();
                        assert_eq!(y.len(), want, "{ops:?} at {n2}");
                        assert_eq!(y.to_vec().last().copied(), want.checked_sub(1).map(|v| v as u32));
                        assert_eq!((f.stats().recordings, f.stats().replays), (1, 1));
                    }
                    None => {
                        let msg = common::panic_message(std::panic::AssertUnwindSafe(|| {
                            let _ = f.call(&Float32::zeros(n2));
                        }));
                        assert!(msg.contains("out of range"), "{msg}");
                    }
                }
            });
        }
    }
}

/// A frozen function can move to another thread, and closures of eight arguments work.
#[test]
fn frozen_functions_are_send_and_take_eight_arguments() {
    leak_checked(|| {
        fn assert_send<T: Send>(_: &T) {}
        // `&Vec` and `&String`: the argument types a frozen function takes are `Traverse` types
        #[allow(clippy::too_many_arguments, clippy::ptr_arg)]
        fn eight(
            a: &Float32,
            b: &Float32,
            c: &mut Float32,
            d: &u32,
            e: &Float32,
            f: &Option<Float32>,
            g: &Vec<Float32>,
            h: &String,
        ) -> Float32 {
            *c = &*c + 1.0;
            let extra = f.clone().unwrap_or_else(|| Float32::zeros(a.size()));
            a + b + &*c + e + extra + g.len() as f32 + (*d as f32) + h.len() as f32
        }
        let mut f = kiln::freeze(eight);
        assert_send(&f);
        let one = Float32::ones(3);
        let mut c = Float32::from_slice(&[0.0; 3]);
        let name = String::from("ab");
        let out = std::thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..3 {
                    f.call(
                        &one,
                        &one,
                        &mut c,
                        &1,
                        &one,
                        &None,
                        &vec![one.clone()],
                        &name,
                    )
                    .unwrap();
                }
                f.call(
                    &one,
                    &one,
                    &mut c,
                    &1,
                    &one,
                    &None,
                    &vec![one.clone()],
                    &name,
                )
                .unwrap()
            })
            .join()
            .unwrap()
        });
        // c counts the calls; 1 + 1 + 4 + 1 + 0 + 1 + 1 + 2
        assert_eq!(out.to_vec(), vec![11.0; 3]);
        assert_eq!(
            (f.stats().recordings, f.stats().replays),
            (1, 3),
            "{}",
            f.stats()
        );
    });
}

/// A lazy array made before the call and computed inside would be rebound to the new inputs on
/// replay: it is refused like any hidden input.
#[test]
fn captured_lazy_expression_is_a_hidden_input() {
    leak_checked(|| {
        let x = Float32::from_slice(&[1.0, 2.0]);
        let lazy = (&x * 2.0).label("doubled");
        let mut f = kiln::freeze(move |a: &Float32| -> Float32 { a + &lazy });
        let err = f.call(&x).unwrap_err().to_string();
        assert!(
            err.contains("doubled") && err.contains("with_state"),
            "{err}"
        );
        // an identical expression traced inside is the function's own
        let mut g = kiln::freeze(|a: &Float32| -> Float32 { a + (a * 2.0) });
        let _outside = &x * 2.0;
        for _ in 0..2 {
            assert_eq!(g.call(&x).unwrap().to_vec(), vec![3.0, 6.0]);
        }
        assert_eq!(g.stats().replays, 1);
    });
}

/// Rust code that looks at a size (`len()`, `is_empty()`, `==`) makes the recording hold only for
/// what it saw — also for lengths read back from `compress`, which are checked as the replay runs.
#[test]
fn sizes_seen_by_rust_code_are_guarded() {
    leak_checked(|| {
        let mut count = kiln::freeze(|m: &Bool| -> UInt32 { UInt32::arange(m.compress().len()) });
        let mut empty = kiln::freeze(|m: &Bool| -> Float32 {
            if m.compress().is_empty() {
                Float32::full(-1.0, 1)
            } else {
                Float32::full(1.0, 1)
            }
        });
        let mut branch = kiln::freeze(|x: &Float32| -> Float32 {
            if x.size() == 8 {
                x * 2.0
            } else {
                x * 3.0
            }
        });
        let masks: [&[bool]; 5] = [
            &[true, false, true, false],
            &[true, true, true, false],
            &[false; 4],
            &[true, false, true, false],
            &[false, false, false, true],
        ];
        for m in masks {
            let mask = Bool::from_slice(m);
            let n = m.iter().filter(|&&b| b).count();
            assert_eq!(count.call(&mask).unwrap().len(), n, "{m:?}");
            let e = empty.call(&mask).unwrap().item();
            assert_eq!(e, if n == 0 { -1.0 } else { 1.0 }, "{m:?}");
        }
        assert!(count.stats().replays >= 1, "{}", count.stats());
        for n in [8usize, 16, 8, 4] {
            let y = branch.call(&Float32::ones(n)).unwrap().to_vec();
            assert_eq!(y, vec![if n == 8 { 2.0 } else { 3.0 }; n]);
        }
        // `==` pins the value it saw: 8 and 16 record, 8 replays, 4 records again
        let s = branch.stats();
        assert_eq!((s.recordings, s.replays), (3, 1), "{s}");
        assert!(s.retraces[0].contains("`==` at"), "{s}");
    });
}

/// `linspace` with a `Size` computes its step on the host: the recording follows the value.
#[test]
fn linspace_with_size() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32| -> Float32 {
            Float32::linspace(0.0, 1.0, x.size() / 2) + 0.0
        });
        for n in [2usize, 8, 2, 10] {
            let want = Float32::linspace(0.0, 1.0, n / 2).to_vec();
            assert_eq!(f.call(&Float32::zeros(n)).unwrap().to_vec(), want, "{n}");
        }
        assert_eq!((f.stats().recordings, f.stats().replays), (3, 1));
    });
}

/// A one-lane `arange` whose size follows the inputs broadcasts as 0, as unfrozen.
#[test]
fn one_lane_symbolic_counter_broadcasts_as_zero() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32| -> Float32 { x + Float32::arange(x.size() / 4) });
        for n in [5usize, 6, 7, 4] {
            let x = Float32::arange(n);
            assert_eq!(f.call(&x).unwrap().to_vec(), x.to_vec(), "{n}");
        }
        assert_eq!((f.stats().recordings, f.stats().replays), (1, 3));
    });
}

/// A `&mut` argument replaced twice inside (its id freed and reused) still gets the final value.
#[test]
fn mut_argument_replaced_twice() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &mut Float32| {
            *x = Float32::zeros(1);
            *x = Float32::full(2.0, 3);
        });
        for _ in 0..3 {
            let mut x = Float32::from_slice(&[5.0]);
            f.call(&mut x).unwrap();
            assert_eq!(x.to_vec(), vec![2.0; 3]);
        }
    });
}

/// A size-1 operand read as a plain input in a one-lane kernel must be re-decided when that
/// kernel grows (it becomes a broadcast): the recording is redone, never misread.
#[test]
fn size_one_input_or_broadcast_is_redecided() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32| -> Float32 { x.block_sum(256) * &x.sum() });
        for n in [100usize, 1000, 200, 2000] {
            let x = Float32::ones(n);
            let want: Vec<f32> = (0..n.div_ceil(256))
                .map(|b| (n - b * 256).min(256) as f32 * n as f32)
                .collect();
            assert_eq!(f.call(&x).unwrap().to_vec(), want, "{n}");
        }
        assert_eq!(
            (f.stats().recordings, f.stats().replays),
            (2, 2),
            "{}",
            f.stats()
        );
    });
}

/// The limit holds whatever the reason for recording (here a changing literal).
#[test]
fn limit_holds_for_changing_literals() {
    leak_checked(|| {
        let mut f =
            kiln::freeze(|x: &Float32, s: &UInt32| -> Float32 { x + s.cast::<f32>() }).limit(1);
        let x = Float32::zeros(2);
        for i in 0..4u32 {
            assert_eq!(
                f.call(&x, &UInt32::from(i)).unwrap().to_vec(),
                vec![i as f32; 2]
            );
        }
        assert_eq!(f.stats().recordings, 1, "{}", f.stats());
    });
}

/// A fused block reduction (of an unevaluated expression) is recorded and replayed at other sizes.
#[test]
fn fused_block_reduction_replays() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32| -> Float32 { (x * 2.0 + 1.0).block_sum(3) });
        for n in [10usize, 17, 3, 40_000] {
            let x = Float32::arange(n);
            let want = (Float32::arange(n) * 2.0 + 1.0)
                .eval()
                .block_sum(3)
                .to_vec();
            assert_eq!(f.call(&x).unwrap().to_vec(), want, "{n}");
        }
        assert_eq!(
            (f.stats().recordings, f.stats().replays),
            (1, 3),
            "{}",
            f.stats()
        );
    });
}

/// A shape check on an input's size (`Tensor::from_array`) holds in replays: another size
/// records anew, where the check fails as it would unfrozen.
#[test]
fn shape_checks_on_input_sizes_are_not_replayed_past() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32| -> Float32 {
            Tensor::from_array(x.clone(), &[2, 3])
                .sum_axis(1)
                .into_array()
        });
        assert_eq!(
            f.call(&Float32::arange(6)).unwrap().to_vec(),
            vec![3.0, 12.0]
        );
        assert_eq!(
            f.call(&Float32::arange(6)).unwrap().to_vec(),
            vec![3.0, 12.0]
        );
        let msg = common::panic_message(std::panic::AssertUnwindSafe(|| {
            let _ = f.call(&Float32::arange(8));
        }));
        assert!(
            msg.contains("8 elements") && msg.contains("[2, 3]"),
            "{msg}"
        );
    });
}

#[test]
fn past_the_limit_the_least_recently_used_recording_is_replaced() {
    common::leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32, k: &u32| x * *k as f32)
            .limit(2)
            .evict_least_recent(true);
        let x = Float32::from_slice(&[1.0, 2.0, 3.0]);
        let mut run = |k: u32| {
            let y = f.call(&x, &k).unwrap();
            assert_eq!(y.to_vec(), vec![k as f32, 2.0 * k as f32, 3.0 * k as f32]);
            (
                f.stats().recordings,
                f.stats().replays,
                f.cached_recordings(),
            )
        };
        assert_eq!(run(1), (1, 0, 1));
        assert_eq!(run(2), (2, 0, 2));
        assert_eq!(run(1), (2, 1, 2)); // 1 is now the most recent
        assert_eq!(run(3), (3, 1, 2)); // evicts 2
        assert_eq!(run(1), (3, 2, 2)); // still there
        assert_eq!(run(2), (4, 2, 2)); // recorded again, evicting 3
        assert_eq!(run(3), (5, 2, 2));
        assert_eq!(f.stats().unfrozen, 0);
    });
}

#[test]
fn without_eviction_layouts_past_the_limit_run_unfrozen() {
    common::leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32, k: &u32| x * *k as f32).limit(1);
        let x = Float32::from_slice(&[1.0, 2.0]);
        for k in [1u32, 2, 1, 2] {
            assert_eq!(
                f.call(&x, &k).unwrap().to_vec(),
                vec![k as f32, 2.0 * k as f32]
            );
        }
        assert_eq!(
            (f.stats().recordings, f.stats().replays, f.stats().unfrozen),
            (1, 1, 2)
        );
    });
}

#[test]
fn a_thread_can_turn_freezing_off_for_itself() {
    common::leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32| x * 2.0f32);
        let x = Float32::from_slice(&[1.0, 2.0]);
        f.call(&x).unwrap();
        let before = kiln::engine::config::set_thread_freeze(false);
        assert_eq!(f.call(&x).unwrap().to_vec(), vec![2.0, 4.0]);
        assert_eq!((f.stats().recordings, f.stats().replays), (1, 0));
        // another thread still freezes
        std::thread::scope(|s| {
            s.spawn(|| assert!(kiln::engine::config::freeze_enabled()));
        });
        kiln::engine::config::set_thread_freeze(before);
        f.call(&x).unwrap();
        assert_eq!((f.stats().recordings, f.stats().replays), (1, 1));
    });
}
