//! Edge cases of the public API that used to give wrong answers silently: slice positions that do
//! not fit `isize`, shape products that overflow, `whos()` on huge lazy arrays, the sign of empty
//! float sums, `argmax` over an empty axis, and `try_binary` / `from_id` given an op or a variable
//! of the wrong kind. Each test failed before its fix.

mod common;

use common::{leak_checked, panic_message};
use kiln::prelude::*;

/// The error message of a `Result` that must be an error.
fn err_of<T>(r: kiln::Result<T>) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

/// Positions given as `usize` beyond `isize::MAX` used to wrap (`usize::MAX as isize == -1`) and
/// then count from the end: `s![usize::MAX..]` gave the last element, `s![..usize::MAX]` dropped
/// it. They are out of range, like any position past the axis (kiln does not clamp, as ndarray).
#[test]
fn slice_positions_beyond_isize_are_out_of_range() {
    leak_checked(|| {
        let r = Tensor::<i32>::arange(4);
        let bad: [(&str, &[kiln::tensor::SliceArg]); 8] = [
            ("start", kiln::s![usize::MAX..]),
            ("stop", kiln::s![..usize::MAX]),
            ("stop", kiln::s![..=usize::MAX]),
            ("start", kiln::s![usize::MAX - 1..]),
            ("start", kiln::s![usize::MAX - 2..usize::MAX]),
            ("start", kiln::s![usize::MAX..=usize::MAX]),
            ("stop", kiln::s![..=isize::MAX]),
            ("start", kiln::s![(1usize << 63)..]),
        ];
        for (what, args) in bad {
            let e = err_of(r.try_slice(args));
            assert!(
                e.contains(&format!("slice: {what}")) && e.contains("out of range"),
                "{args:?}: {e}"
            );
            assert!(e.contains("axis 0 of length 4"), "{args:?}: {e}");
        }
        // the panicking form says the same
        let msg = panic_message(|| drop(Tensor::<i32>::arange(4).slice(kiln::s![usize::MAX..])));
        assert!(
            msg.contains("slice: start") && msg.contains("out of range"),
            "{msg}"
        );
        // an index too large (it already was an error) and `index_axis`, which wrapped too
        assert!(r.try_slice(kiln::s![usize::MAX]).is_err());
        let msg = panic_message(|| drop(Tensor::<i32>::arange(4).index_axis(0, usize::MAX)));
        assert!(
            msg.contains("out of range") && msg.contains("axis 0 of length 4"),
            "{msg}"
        );
        // positions past the axis that fit isize are errors too (no NumPy-style clamping) …
        let e = err_of(r.try_slice(kiln::s![10..]));
        assert!(e.contains("start 10 is out of range"), "{e}");
        let e = err_of(r.try_slice(kiln::s![..5usize]));
        assert!(e.contains("stop 5 is out of range"), "{e}");
        // … and every valid usize form keeps working
        assert_eq!(r.slice(kiln::s![1usize..]).to_vec(), vec![1, 2, 3]);
        assert_eq!(r.slice(kiln::s![..4usize]).to_vec(), vec![0, 1, 2, 3]);
        assert_eq!(r.slice(kiln::s![..=3usize]).to_vec(), vec![0, 1, 2, 3]);
        assert_eq!(r.slice(kiln::s![1usize..=2usize]).to_vec(), vec![1, 2]);
        assert_eq!(r.slice(kiln::s![4usize..]).to_vec(), Vec::<i32>::new());
        assert_eq!(r.slice(kiln::s![3usize]).to_vec(), vec![3]);
        assert_eq!(r.index_axis(0, 2).to_vec(), vec![2]);
        assert_eq!(r.slice(kiln::s![..=-1]).to_vec(), vec![0, 1, 2, 3]);
    });
}

/// `Tensor::eye(1 << 32)` computed `n * n` unchecked: in release it wrapped to 0 and gave a
/// `[2^32, 2^32]` tensor over no elements. Every shape product is checked and names the shape.
#[test]
fn overflowing_shapes_are_errors_naming_the_shape() {
    leak_checked(|| {
        let n = 1usize << 32;
        let msg = panic_message(|| drop(Tensor::<f32>::eye(n)));
        assert!(
            msg.contains("[4294967296, 4294967296]") && msg.contains("more elements than fit"),
            "{msg}"
        );
        assert_eq!(Tensor::<f32>::eye(0).shape(), &[0, 0]);
        assert_eq!(Tensor::<i32>::eye(2).to_vec(), vec![1, 0, 0, 1]);
        // concat summed the lengths along the axis unchecked: 2^63 + 2^63 wrapped to an empty
        // tensor
        let half = Tensor::<f32>::full(1.0, &[1 << 63]);
        let e = err_of(Tensor::try_concat(&[half.clone(), half.clone()], 0));
        assert!(
            e.contains("concat along axis 0") && e.contains("[9223372036854775808]"),
            "{e}"
        );
        let msg = panic_message(|| drop(Tensor::concat(&[half.clone(), half.clone()], 0)));
        assert!(msg.contains("concat along axis 0"), "{msg}");
        let e = err_of(Tensor::try_concat(&[half.clone(), half.clone()], 0));
        assert!(e.contains("more elements than fit"), "{e}");
        drop(half);
        // the siblings that were already checked stay so
        let big = [n, n];
        let msg = panic_message(|| drop(Tensor::<f32>::zeros(&[1 << 32, 1 << 32])));
        assert!(msg.contains("[4294967296, 4294967296]"), "{msg}");
        let msg = panic_message(|| drop(Tensor::<f32>::full(0.0, &big)));
        assert!(msg.contains("[4294967296, 4294967296]"), "{msg}");
        let e = err_of(Tensor::<f32>::try_from_vec(vec![], &big));
        assert!(e.contains("[4294967296, 4294967296]"), "{e}");
        let e = err_of(Tensor::<f32>::try_from_array(Float32::zeros(0), &big));
        assert!(e.contains("[4294967296, 4294967296]"), "{e}");
        let e = err_of(Tensor::<f32>::zeros(&[0]).try_reshape(&big));
        assert!(e.contains("[4294967296, 4294967296]"), "{e}");
        let e = err_of(Tensor::<f32>::zeros(&[1, 1]).try_broadcast_to(&big));
        assert!(e.contains("[4294967296, 4294967296]"), "{e}");
        let col = Tensor::<f32>::zeros(&[n, 1]);
        let row = Tensor::<f32>::zeros(&[1, n]);
        let msg = panic_message(|| drop(&col + &row));
        assert!(msg.contains("[4294967296, 4294967296]"), "{msg}");
        let e = err_of(Tensor::<f32>::zeros(&[n, 0]).try_matmul(&Tensor::<f32>::zeros(&[0, n])));
        assert!(e.contains("more elements than fit"), "{e}");
    });
}

/// `whos()` multiplied a variable's size by its element size unchecked: a lazy array of 2^62 f64
/// (2^65 bytes) showed as 0 B in release and panicked in debug builds.
#[test]
fn whos_reports_the_memory_of_huge_lazy_arrays() {
    leak_checked(|| {
        let x = Float64::arange(1usize << 62);
        let text = kiln::whos().to_string();
        // 2^65 bytes = 2^35 GiB: the array's row and the scheduled total
        assert!(text.contains("34359738368.00 GiB"), "{text}");
        assert!(
            text.contains("Memory usage (scheduled) : 0 B + 34359738368.00 GiB"),
            "{text}"
        );
        // a literal of usize::MAX elements neither wraps nor panics
        let y = Float64::zeros(usize::MAX);
        let text = kiln::whos().to_string();
        assert!(text.contains("137438953472.00 GiB"), "{text}");
        drop((x, y));
    });
}

fn bits32(a: &Float32) -> u32 {
    a.item().to_bits()
}
fn bits64(a: &Float64) -> u64 {
    a.item().to_bits()
}

/// The sum of an empty f32 array was -0.0 (an empty `Iterator::sum` of floats starts at -0.0),
/// while f64 gave +0.0. Every empty float sum is +0.0, as in NumPy; products are 1, means NaN.
#[test]
fn empty_float_reductions_have_numpy_values() {
    leak_checked(|| {
        let (p0, one32, one64) = (0.0f32.to_bits(), 1.0f32.to_bits(), 1.0f64.to_bits());
        // evaluated, literal and lazy empty arrays
        let e32 = Float32::from_slice(&[]);
        let e64 = Float64::from_slice(&[]);
        assert_eq!(bits32(&e32.sum()), p0);
        assert_eq!(bits64(&e64.sum()), 0.0f64.to_bits());
        assert_eq!(bits32(&Float32::zeros(0).sum()), p0);
        assert_eq!(bits32(&(Float32::arange(0) * 2.0).sum()), p0);
        assert_eq!(bits64(&(Float64::arange(0) * 2.0).sum()), 0.0f64.to_bits());
        assert_eq!(bits32(&e32.dot(&e32)), p0);
        assert_eq!(bits64(&e64.dot(&e64)), 0.0f64.to_bits());
        assert_eq!(bits32(&e32.prod()), one32);
        assert_eq!(bits64(&e64.prod()), one64);
        assert_eq!(e32.reduce_min().item(), f32::INFINITY);
        assert_eq!(e32.reduce_max().item(), f32::NEG_INFINITY);
        assert_eq!(e32.block_sum(4).to_vec(), Vec::<f32>::new());
        // tensors: all elements and along an empty axis
        let t = Tensor::<f32>::zeros(&[2, 0]);
        assert_eq!(bits32(&t.sum()), p0);
        assert_eq!(bits32(&t.prod()), one32);
        assert!(t.mean().item().is_nan());
        let s: Vec<u32> = t.sum_axis(1).to_vec().iter().map(|v| v.to_bits()).collect();
        assert_eq!(s, vec![p0, p0]);
        let p: Vec<u32> = t
            .prod_axis(1)
            .to_vec()
            .iter()
            .map(|v| v.to_bits())
            .collect();
        assert_eq!(p, vec![one32, one32]);
        assert!(t.mean_axis(1).to_vec().iter().all(|v| v.is_nan()));
        assert_eq!(t.sum_axis(0).shape(), &[0]);
        let t64 = Tensor::<f64>::zeros(&[0, 3]);
        let s: Vec<u64> = t64
            .sum_axis(0)
            .to_vec()
            .iter()
            .map(|v| v.to_bits())
            .collect();
        assert_eq!(s, vec![0.0f64.to_bits(); 3]);
        // a sum of negative zeros is still a sum of elements (not the empty case)
        assert_eq!(Float32::from_slice(&[1.0, -1.0]).sum().item().to_bits(), p0);
        drop((e32, e64));
    });
}

/// `argmax_axis` over an empty axis returned 0 for every output element (an index that does not
/// exist). NumPy raises; so does kiln.
#[test]
fn argmax_over_an_empty_axis_is_an_error() {
    leak_checked(|| {
        let t = Tensor::<f32>::zeros(&[2, 0]);
        let e = err_of(t.try_argmax_axis(1));
        assert!(
            e.contains("argmax")
                && e.contains("axis 1")
                && e.contains("empty")
                && e.contains("[2, 0]"),
            "{e}"
        );
        let e = err_of(t.try_argmax_axis_keepdim(1));
        assert!(e.contains("argmax") && e.contains("empty"), "{e}");
        let msg = panic_message(|| drop(Tensor::<f32>::zeros(&[2, 0]).argmax_axis(1)));
        assert!(msg.contains("argmax") && msg.contains("empty"), "{msg}");
        let msg = panic_message(|| drop(Tensor::<i32>::zeros(&[0]).argmax_axis_keepdim(0)));
        assert!(msg.contains("argmax") && msg.contains("empty"), "{msg}");
        // a non-empty axis of an empty tensor has nothing to index: an empty result
        let a = t.argmax_axis(0);
        assert_eq!(a.shape(), &[0]);
        assert_eq!(a.to_vec(), Vec::<u64>::new());
        let t = Tensor::<f32>::from_vec(vec![1.0, 5.0, 5.0, 7.0, 2.0, 0.0], &[2, 3]);
        assert_eq!(t.try_argmax_axis(1).unwrap().to_vec(), vec![1, 0]);
        assert_eq!(t.try_argmax_axis_keepdim(0).unwrap().shape(), &[1, 3]);
    });
}

/// `try_binary` wrapped whatever the engine made: `Op::Lt` gave a `Float32` handle to a bool
/// variable, and a unary op or `Op::Gather` hit an `assert!` in the engine. They are errors now.
#[test]
fn try_binary_refuses_ops_that_are_not_binary_of_the_arrays_type() {
    leak_checked(|| {
        let a = Float32::from_slice(&[1.0, 4.0]);
        let b = Float32::from_slice(&[2.0, 3.0]);
        let e = err_of(Float32::try_binary(Op::Lt, &a, &b));
        assert!(
            e.contains("`lt`") && e.contains("bool") && e.contains("f32"),
            "{e}"
        );
        let e = err_of(Float32::try_binary(Op::Sqrt, &a, &b));
        assert!(
            e.contains("`sqrt`") && e.contains("1 operand") && e.contains("not a binary op"),
            "{e}"
        );
        let e = err_of(Float32::try_binary(Op::Select, &a, &b));
        assert!(e.contains("`select`") && e.contains("3 operands"), "{e}");
        for op in [Op::Gather, Op::Literal, Op::Tap, Op::LoopNext] {
            let e = err_of(Float32::try_binary(op, &a, &b));
            assert!(
                e.contains(op.name()) && e.contains("try_binary"),
                "{op:?}: {e}"
            );
        }
        // what still works: binary ops whose result has the arrays' type
        let s = Float32::try_binary(Op::Add, &a, &b).unwrap();
        assert_eq!(s.to_vec(), vec![3.0, 7.0]);
        let m = Bool::from_slice(&[true, false]);
        let eq = Bool::try_binary(Op::Eq, &m, &m).unwrap();
        assert_eq!(eq.to_vec(), vec![true, true]);
        // the engine's own entry point returns the error instead of asserting
        let e = err_of(kiln_core::op(Op::Sqrt, &[a.id(), b.id()]));
        assert!(e.contains("`sqrt`") && e.contains("1 operand"), "{e}");
        let e = err_of(kiln_core::op(Op::Gather, &[a.id(), b.id()]));
        assert!(e.contains("`gather`"), "{e}");
        let e = err_of(kiln_core::convert(Op::Add, a.id(), kiln::VarType::F64));
        assert!(e.contains("`add`") && e.contains("Cast"), "{e}");
        drop((a, b, s, m, eq));
    });
}

/// `Float64::from_id` accepted a variable of another type (checked only by a `debug_assert!`), so
/// a release build read f32 bits as f64. `try_from_id` returns the error; `from_id` panics with it.
#[test]
fn from_id_checks_the_variable_type() {
    leak_checked(|| {
        let id = Float32::from_slice(&[1.5]).into_id();
        let e = err_of(Float64::try_from_id(id));
        assert!(
            e.contains("f32") && e.contains("f64") && e.contains("Array<f64>"),
            "{e}"
        );
        let msg = panic_message(|| drop(Float64::from_id(id)));
        assert!(msg.contains("f32") && msg.contains("f64"), "{msg}");
        // on error the reference stays with the caller, who can wrap it with the right type
        let a = Float32::try_from_id(id).unwrap();
        assert_eq!(a.to_vec(), vec![1.5]);
    });
}
