//! Issue 24 item 7: `Array` and `Tensor` print alike (`Display`: values NumPy/ndarray style,
//! evaluating), and `Debug` describes the handle (type, size, label, evaluated/literal/lazy)
//! without evaluating anything (`Tensor`'s `{:?}` in ndarray's layout, `{:#?}` as `Array`'s).

use kiln::prelude::*;
use std::fmt::Display;
use std::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::new(());
fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The reference: `[a, b, c]` with each element's `Display`; over 500 elements, the first and
/// last five around `...`.
fn reference<T: Display>(v: &[T]) -> String {
    let show: Vec<String> = if v.len() > 500 {
        let mut s: Vec<String> = v[..5].iter().map(|x| x.to_string()).collect();
        s.push("...".into());
        s.extend(v[v.len() - 5..].iter().map(|x| x.to_string()));
        s
    } else {
        v.iter().map(|x| x.to_string()).collect()
    };
    format!("[{}]", show.join(", "))
}

#[test]
fn arrays_and_rank1_tensors_display_alike() {
    // (every test holds the lock: another test's launches would show in the launch count)
    let _s = serial();
    for n in [0usize, 1, 6, 7, 500, 501, 16385] {
        let f: Vec<f32> = (0..n).map(|i| i as f32 * 0.25 - 3.0).collect();
        let i: Vec<i64> = (0..n).map(|i| i as i64 * 7 - 20).collect();
        let b: Vec<bool> = (0..n).map(|i| i % 3 == 0).collect();
        let fa = Float32::from_slice(&f) * 1.0; // lazy: Display evaluates it
        let (ia, ba) = (Int64::from_slice(&i), Bool::from_slice(&b));
        assert_eq!(fa.to_string(), reference(&f), "f32 n={n}");
        assert_eq!(ia.to_string(), reference(&i), "i64 n={n}");
        assert_eq!(ba.to_string(), reference(&b), "bool n={n}");
        if n > 0 {
            // rank-1 tensors print the same text (ndarray's nesting for one axis)
            assert_eq!(Tensor::from_slice(&f, &[n]).to_string(), fa.to_string());
            assert_eq!(Tensor::from_slice(&i, &[n]).to_string(), ia.to_string());
        }
    }
}

#[test]
fn debug_describes_without_evaluating() {
    let _s = serial();
    let x = (Float32::arange(4) * 2.0).label("doubled");
    let before = kiln::stats().launches;
    let d = format!("{x:?}");
    assert_eq!(kiln::stats().launches, before, "Debug ran a kernel");
    assert!(!x.is_evaluated());
    assert_eq!(d, r#"Array<f32>[4] "doubled" lazy"#);
    x.eval();
    assert_eq!(
        format!("{x:?}"),
        r#"Array<f32>[4] "doubled" evaluated [0, 2, 4, 6]"#
    );

    // a literal's values are known without evaluating; a huge one is not spelled out
    let lit = Int32::full(-3, 3);
    assert_eq!(format!("{lit:?}"), "Array<i32>[3] literal [-3, -3, -3]");
    let big = UInt64::full(9, 1_000_000_000);
    assert_eq!(
        format!("{big:?}"),
        "Array<u64>[1000000000] literal [9, ... (1000000000 times)]"
    );
    assert!(!big.is_evaluated());

    // tensors: ndarray's layout (values, then fields), never evaluating either
    let t = Tensor::<i32>::arange(6).reshape(&[2, 3]).label("grid");
    let before = kiln::stats().launches;
    assert_eq!(
        format!("{t:?}"),
        r#"lazy Tensor<i32>, shape=[2, 3], label="grid""#
    );
    assert_eq!(format!("{t:#?}"), r#"Tensor<i32>[2, 3] "grid" lazy"#);
    assert_eq!(kiln::stats().launches, before, "Debug ran a kernel");
    assert!(!t.is_evaluated());
    assert_eq!(t.to_string(), "[[0, 1, 2],\n [3, 4, 5]]");
    assert_eq!(
        format!("{t:?}"),
        "[[0, 1, 2],\n [3, 4, 5]], shape=[2, 3], label=\"grid\""
    );
    assert_eq!(
        format!("{t:#?}"),
        "Tensor<i32>[2, 3] \"grid\" evaluated [[0, 1, 2],\n [3, 4, 5]]"
    );
    let z = Tensor::<f64>::zeros(&[2, 0]);
    assert_eq!(format!("{z:?}"), "[[]], shape=[2, 0], literal");
    assert_eq!(format!("{z:#?}"), "Tensor<f64>[2, 0] literal [[]]");
    let one = Tensor::<bool>::full(true, &[]);
    assert_eq!(format!("{one:?}"), "true, shape=[], literal");
    let big = Tensor::<f32>::full(0.5, &[1000, 1000]);
    assert_eq!(
        format!("{big:?}"),
        "[0.5, ... (1000000 times)], shape=[1000, 1000], literal"
    );
    assert!(!big.is_evaluated());
}

#[test]
fn debug_inside_a_frozen_function_reads_nothing() {
    // (every test holds the lock: another test's launches would show in the launch count)
    let _s = serial();
    // inside a recording a read is refused; Debug must not trip over it
    let mut f = kiln::freeze(|x: &Float32| -> Float32 {
        let s = format!("{x:?}");
        assert!(s.starts_with("Array<f32>[3]"), "{s}");
        x * 2.0
    });
    for k in 0..3 {
        let x = Float32::from_slice(&[1.0, 2.0, 3.0]) + k as f32;
        x.eval();
        let y = f.call(&x).unwrap();
        assert_eq!(
            y.to_vec(),
            vec![
                2.0 * (1.0 + k as f32),
                2.0 * (2.0 + k as f32),
                2.0 * (3.0 + k as f32)
            ]
        );
    }
}

#[test]
fn vectors_debug_their_components() {
    // (every test holds the lock: another test's launches would show in the launch count)
    let _s = serial();
    let v = Vector2i::from_fn(|k| Int32::from(k as i32 + 1));
    let s = format!("{v:?}");
    assert!(
        s.contains("literal [1]") && s.contains("literal [2]"),
        "{s}"
    );
}
