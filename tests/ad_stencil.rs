//! Gradients through stencils: reverse mode, forward mode and finite differences (f64) agree
//! for every boundary mode, one and two dimensions, several inputs, `apply_into`, and sizes from
//! one element up; on grids large enough for the interior/border split, reverse against forward
//! mode (`<J v, w> = <v, Jᵀ w>`); refusals name the fix and leak nothing.

mod ad_check;
use ad_check::{check, no_leak, rand, serial};
use kiln::prelude::*;

const MODES: [Boundary; 6] = [
    Boundary::Skip,
    Boundary::Constant(0.5),
    Boundary::Wrap,
    Boundary::Reflect,
    Boundary::Mirror,
    Boundary::Nearest,
];

/// A nonlinear 1-d kernel reading three taps (one twice).
fn kernel_1d(a: &Rel<f64>) -> Float64 {
    a.at([1]) * a.at([0]) + a.at([-1]).sin() - a.at([0]) * 0.5 + a.at([2]) * a.at([2])
}

/// A nonlinear 2-d kernel: a Laplacian plus products of neighbours.
fn kernel_2d(a: &Rel<f64>) -> Float64 {
    a.at([0, 1]) + a.at([0, -1]) + a.at([1, 0]) + a.at([-1, 0]) - 4.0 * a.at([0, 0])
        + a.at([1, 1]) * a.at([0, 0]).exp() * 0.25
        - a.at([-1, 1]).sin() * a.at([0, -1])
}

#[test]
fn every_boundary_mode_1d_matches_finite_differences() {
    let _s = serial();
    for mode in MODES {
        for n in [1usize, 2, 3, 4, 9] {
            let k = kiln::stencil(kernel_1d).boundary(mode);
            check(
                &[rand(n, 3 + n as u64)],
                |x| {
                    let t = Tensor::from_array(x[0].clone(), &[n]);
                    k.apply(&t).unwrap().array().clone()
                },
                1e-6,
            );
        }
    }
}

#[test]
fn every_boundary_mode_2d_matches_finite_differences() {
    let _s = serial();
    for mode in MODES {
        for shape in [[1usize, 1], [2, 3], [4, 5], [6, 3]] {
            let n = shape[0] * shape[1];
            let k = kiln::stencil(kernel_2d).boundary(mode);
            check(
                &[rand(n, 11 + n as u64)],
                |x| {
                    let t = Tensor::from_array(x[0].clone(), &shape);
                    k.apply(&t).unwrap().array().clone()
                },
                1e-6,
            );
        }
    }
}

#[test]
fn skip_with_cval_declared_neighbourhood_and_windows() {
    let _s = serial();
    // a declared neighbourhood wider than the reads widens the border that gets `cval`
    let k = kiln::stencil(|a: &Rel<f64>| a.at([0]) * a.at([1]))
        .neighborhood(&[(-2, 2)])
        .cval(7.0);
    check(
        &[rand(9, 5)],
        |x| {
            let t = Tensor::from_array(x[0].clone(), &[9]);
            k.apply(&t).unwrap().array().clone()
        },
        1e-6,
    );
    // a window reduced with max (a max-pool): the gradient goes to the maximum
    let pool = kiln::stencil(|a: &Rel<f64>| {
        a.window(&[(-1, 1), (-1, 1)])
            .into_iter()
            .reduce(|m, v| m.max(&v))
            .unwrap()
    })
    .boundary(Boundary::Nearest);
    check(
        &[rand(20, 8)],
        |x| {
            let t = Tensor::from_array(x[0].clone(), &[4, 5]);
            pool.apply(&t).unwrap().array().clone()
        },
        1e-6,
    );
}

#[test]
fn two_inputs_and_a_larger_secondary_input() {
    let _s = serial();
    for mode in MODES {
        let k = kiln::stencil(|(a, b): (&Rel<f64>, &Rel<f64>)| {
            a.at([0, 1]) * b.at([1, 0]) + (a.at([0, 0]) - b.at([-1, -1])).cos()
        })
        .boundary(mode);
        // same shapes
        check(
            &[rand(12, 1), rand(12, 2)],
            |x| {
                let a = Tensor::from_array(x[0].clone(), &[3, 4]);
                let b = Tensor::from_array(x[1].clone(), &[3, 4]);
                k.apply((&a, &b)).unwrap().array().clone()
            },
            1e-6,
        );
        // the second input larger than the first: its gradient is scattered
        check(
            &[rand(12, 3), rand(20, 4)],
            |x| {
                let a = Tensor::from_array(x[0].clone(), &[3, 4]);
                let b = Tensor::from_array(x[1].clone(), &[4, 5]);
                k.apply((&a, &b)).unwrap().array().clone()
            },
            1e-6,
        );
    }
}

#[test]
fn apply_into_keeps_the_border_of_out_and_its_gradient() {
    let _s = serial();
    let k = kiln::stencil(|a: &Rel<f64>| a.at([-1]) * a.at([1]));
    check(
        &[rand(6, 9), rand(6, 10)],
        |x| {
            let a = Tensor::from_array(x[0].clone(), &[6]);
            let mut out = Tensor::from_array(x[1].clone(), &[6]);
            k.apply_into(&a, &mut out).unwrap();
            out.array().clone()
        },
        1e-6,
    );
    // with a captured weight and field too (their parents sit between the input's and out's)
    check(
        &[rand(6, 11), rand(6, 12), vec![0.6], rand(6, 13)],
        |x| {
            let a = Tensor::from_array(x[0].clone(), &[6]);
            let mut out = Tensor::from_array(x[1].clone(), &[6]);
            let (w, f) = (&x[2], &x[3]);
            let k = kiln::stencil(|r: &Rel<f64>| r.at([-1]) * r.at([1]) * w + f * w);
            k.apply_into(&a, &mut out).unwrap();
            out.array().clone()
        },
        1e-6,
    );
}

#[test]
fn single_precision_and_a_cast_output() {
    let _s = serial();
    let x = Tensor::<f32>::from_vec((0..12).map(|v| v as f32 * 0.1).collect(), &[12]);
    let mut a = x.array().clone();
    a.enable_grad();
    let t = Tensor::from_array(a.clone(), &[12]);
    let k = kiln::stencil(|a: &Rel<f32>| (a.at([1]) * a.at([-1])).cast::<f64>())
        .boundary(Boundary::Wrap);
    let y = k.apply(&t).unwrap();
    y.array().sum().backward();
    let g = a.grad().to_vec();
    let xs = x.to_vec();
    for i in 0..12 {
        // y_j = x_{j+1} x_{j-1}: ∂Σy/∂x_i = x_{i-2} + x_{i+2} (wrapped)
        let want = xs[(i + 10) % 12] + xs[(i + 2) % 12];
        assert!((g[i] - want).abs() < 1e-5, "lane {i}: {} vs {want}", g[i]);
    }
}

/// Reverse against forward mode on a grid large enough that the interior runs as shifted loads:
/// `<J v, w>` (one forward pass) equals `<v, Jᵀ w>` (one backward pass).
fn dot_test(shape: [usize; 2], mode: Boundary) {
    let k = kiln::stencil(kernel_2d).boundary(mode);
    dot_check(shape, mode, &|t| k.apply(t).unwrap());
}

/// `<J v, w> = <v, Jᵀ w>` for the stencil application `apply` on a grid of `shape`.
fn dot_check(shape: [usize; 2], mode: Boundary, apply: &dyn Fn(&Tensor<f64>) -> Tensor<f64>) {
    let n = shape[0] * shape[1];
    let (x0, v, w) = (rand(n, 21), rand(n, 22), rand(n, 23));
    // reverse
    let mut x = Float64::from_slice(&x0);
    x.enable_grad();
    let y = apply(&Tensor::from_array(x.clone(), &shape));
    kiln::ad::backward_from(y.array(), &Float64::from_slice(&w)).unwrap();
    let jt_w = x.grad().to_vec();
    // forward
    let mut x = Float64::from_slice(&x0);
    x.enable_grad();
    x.set_grad(&Float64::from_slice(&v));
    let y = apply(&Tensor::from_array(x.clone(), &shape));
    kiln::ad::forward(&x).unwrap();
    let j_v = y.array().grad().to_vec();
    let lhs: f64 = j_v.iter().zip(&w).map(|(a, b)| a * b).sum();
    let rhs: f64 = v.iter().zip(&jt_w).map(|(a, b)| a * b).sum();
    assert!(
        (lhs - rhs).abs() <= 1e-9 * (1.0 + lhs.abs()),
        "{mode:?} {shape:?}: <Jv, w> = {lhs} but <v, J^T w> = {rhs}"
    );
}

#[test]
fn reverse_equals_forward_on_split_grids() {
    let _s = serial();
    for mode in MODES {
        for shape in [[20, 80], [3, 130], [67, 65]] {
            dot_test(shape, mode);
        }
    }
}

/// Kernels whose neighbourhood leaves out the lane itself (reads on one side only): the lanes a
/// `Skip` forward computed are those inside the domain whose neighbourhood is, which the adjoint
/// must mask as one box; affine (constant partials) and not.
#[test]
fn one_sided_neighbourhoods_in_every_mode() {
    let _s = serial();
    let affine = |a: &Rel<f64>| a.at([1, 2]) * 3.0 - a.at([2, 1]) + a.at([1, 1]) * 0.5;
    let curved = |a: &Rel<f64>| a.at([1, 2]) * a.at([2, 1]) - a.at([1, 1]).sin();
    let ahead = |a: &Rel<f64>| a.at([2]) * 2.0 - a.at([3]);
    for mode in MODES {
        for shape in [[1usize, 1], [2, 3], [4, 5], [6, 7]] {
            let n = shape[0] * shape[1];
            let fd = |k: &dyn Fn(&Tensor<f64>) -> Tensor<f64>| {
                check(
                    &[rand(n, 31 + n as u64)],
                    |x| k(&Tensor::from_array(x[0].clone(), &shape)).array().clone(),
                    1e-6,
                )
            };
            let (k1, k2) = (
                kiln::stencil(affine).boundary(mode),
                kiln::stencil(curved).boundary(mode),
            );
            fd(&|t| k1.apply(t).unwrap());
            fd(&|t| k2.apply(t).unwrap());
        }
        for n in [1usize, 3, 4, 6, 40] {
            let k = kiln::stencil(ahead).boundary(mode);
            check(
                &[rand(n, 41 + n as u64)],
                |x| {
                    let t = Tensor::from_array(x[0].clone(), &[n]);
                    k.apply(&t).unwrap().array().clone()
                },
                1e-6,
            );
        }
        // grids large enough for the interior/border split: reverse against forward mode
        for shape in [[30usize, 70], [67, 65]] {
            let (k1, k2) = (
                kiln::stencil(affine).boundary(mode),
                kiln::stencil(curved).boundary(mode),
            );
            dot_check(shape, mode, &|t| k1.apply(t).unwrap());
            dot_check(shape, mode, &|t| k2.apply(t).unwrap());
        }
    }
}

/// A stencil keeps the constant partials of its last application under the structure of the
/// traced value: a kernel whose constant changes between applications (a value it reads from a
/// cell), or that captures an array with a gradient at one application and not at the next, must
/// not be given the partials of another.
#[test]
fn kept_partials_follow_what_the_kernel_traced() {
    let _s = serial();
    let c = std::cell::Cell::new(2.0f64);
    let w = std::cell::RefCell::new(Float64::scalar(0.5));
    let tracked = std::cell::Cell::new(false);
    let k = kiln::stencil(|a: &Rel<f64>| {
        let base = a.at([1]) * c.get() - a.at([-1]);
        if tracked.get() {
            base * &*w.borrow()
        } else {
            base * 0.5
        }
    });
    let n = 12;
    let x0 = rand(n, 61);
    let grad_of = |k: &kiln::Stencil<_>| {
        let mut x = Float64::from_slice(&x0);
        x.enable_grad();
        let y = k.apply(&Tensor::from_array(x.clone(), &[n])).unwrap();
        y.array().sum().backward();
        x.grad().to_vec()
    };
    // Σ_y 0.5 (c x[y+1] − x[y−1]) over y in 1..n−1: x[j] gets 0.5 c if 2 ≤ j, minus 0.5 if j ≤ n−3
    let want = |c: f64| -> Vec<f64> {
        (0..n)
            .map(|j| {
                let a = if j >= 2 { 0.5 * c } else { 0.0 };
                let b = if j + 3 <= n { 0.5 } else { 0.0 };
                a - b
            })
            .collect()
    };
    assert_eq!(grad_of(&k), want(2.0));
    assert_eq!(grad_of(&k), want(2.0), "again, from what was kept");
    c.set(3.0);
    assert_eq!(grad_of(&k), want(3.0), "the constant changed");
    // the same structure, the weight now an array with a gradient: it gets one too
    w.borrow_mut().enable_grad();
    tracked.set(true);
    assert_eq!(grad_of(&k), want(3.0));
    let gw = w.borrow().grad().item();
    let xs: f64 = (1..n - 1).map(|y| 3.0 * x0[y + 1] - x0[y - 1]).sum();
    assert!((gw - xs).abs() <= 1e-12 * xs.abs().max(1.0), "{gw} vs {xs}");
}

/// One array passed as both relatively indexed inputs, read by a kernel that host state
/// re-routes between them: a read of the array is the same whichever input it goes through, so
/// partials kept under the structure of the value could be filed under the wrong input (found by
/// an adversarial pass: gradients of 0 and 3 instead of 5), in both modes.
#[test]
fn one_array_as_two_inputs_rerouted_between_applications() {
    let _s = serial();
    let swap = std::cell::Cell::new(false);
    let st = kiln::stencil(|(a, b): (&Rel<f64>, &Rel<f64>)| {
        if swap.get() {
            b.at([1]) * 2.0 + a.at([-1]) * 3.0
        } else {
            a.at([1]) * 2.0 + b.at([-1]) * 3.0
        }
    })
    .boundary(Boundary::Wrap);
    let n = 8;
    // Σ_y (2 x[y+1] + 3 x[y−1]), wrapped: every x gets 5, either way round
    for round in 0..4 {
        swap.set(round % 2 == 1);
        let mut x = Float64::from_slice(&rand(n, 40));
        x.enable_grad();
        let t = Tensor::from_array(x.clone(), &[n]);
        st.apply((&t, &t)).unwrap().array().sum().backward();
        assert_eq!(x.grad().to_vec(), vec![5.0; n], "reverse, round {round}");
        let mut x = Float64::from_slice(&rand(n, 41));
        x.enable_grad();
        x.set_grad(&Float64::from_slice(&vec![1.0; n]));
        let t = Tensor::from_array(x.clone(), &[n]);
        let y = st.apply((&t, &t)).unwrap();
        kiln::ad::forward(&x).unwrap();
        assert_eq!(
            y.array().grad().to_vec(),
            vec![5.0; n],
            "forward, round {round}"
        );
    }
}

#[test]
fn a_linear_stencil_adjoint_is_its_transpose_and_runs_split() {
    let _s = serial();
    // the 5-point Laplacian with a fixed border: its adjoint reads only the cotangent
    let (h, w) = (40usize, 100usize);
    let lap = kiln::stencil(|a: &Rel<f64>| {
        a.at([0, 1]) + a.at([0, -1]) + a.at([1, 0]) + a.at([-1, 0]) - 4.0 * a.at([0, 0])
    });
    let x0 = rand(h * w, 4);
    let mut x = Float64::from_slice(&x0);
    x.enable_grad();
    let y = lap.apply(&Tensor::from_array(x.clone(), &[h, w])).unwrap();
    let before = kiln::stats().stencil_launches;
    y.array().sum().backward();
    let g = x.grad().to_vec();
    assert!(
        kiln::stats().stencil_launches > before,
        "the adjoint runs as a split stencil launch"
    );
    // Σ_y L(x)_y over interior y: each x gets (#interior neighbours) − 4·[x interior]
    let interior = |i: usize, j: usize| i >= 1 && i + 1 < h && j >= 1 && j + 1 < w;
    for i in 0..h {
        for j in 0..w {
            let mut want = if interior(i, j) { -4.0 } else { 0.0 };
            for (di, dj) in [(0i64, 1i64), (0, -1), (1, 0), (-1, 0)] {
                let (a, b) = (i as i64 - di, j as i64 - dj);
                if a >= 0 && b >= 0 && interior(a as usize, b as usize) {
                    want += 1.0;
                }
            }
            assert_eq!(g[i * w + j], want, "({i}, {j})");
        }
    }
}

#[test]
fn an_affine_adjoint_scales_each_distinct_weight_once() {
    let _s = serial();
    // one heat step `u + 0.2·lap(u)`: its adjoint is `ct + 0.2·(four neighbours) − 0.8·centre`,
    // two products, as the forward has, not one per tap
    let (h, w) = (40usize, 100usize);
    let lap = kiln::stencil(|a: &Rel<f32>| {
        a.at([0, 1]) + a.at([0, -1]) + a.at([1, 0]) + a.at([-1, 0]) - a.at([0, 0]) * 4.0
    });
    let x0: Vec<f32> = rand(h * w, 9).iter().map(|&v| v as f32).collect();
    let mut x = Float32::from_slice(&x0);
    x.enable_grad();
    let u = Tensor::from_array(x.clone(), &[h, w]);
    let y = &u + &(lap.apply(&u).unwrap() * 0.2);
    let weights: Vec<f32> = (0..h * w).map(|k| (k % 7) as f32 - 3.0).collect();
    (y.array() * Float32::from_slice(&weights)).sum().backward();
    let g = x.grad();
    let ir: String = kiln_core::kernels_for(&[g.id()])
        .iter()
        .map(|k| k.to_string())
        .collect();
    let products = ir.matches("mul.f32").count();
    assert_eq!(products, 2, "one product per distinct weight:\n{ir}");
    // and the value is the transpose: ct + 0.2·Σ ct(neighbour interior) − 0.8·ct(x interior)
    let g = g.to_vec();
    let interior = |i: usize, j: usize| i >= 1 && i + 1 < h && j >= 1 && j + 1 < w;
    for i in 0..h {
        for j in 0..w {
            let ct = |a: usize, b: usize| weights[a * w + b] as f64;
            let mut want = ct(i, j) - if interior(i, j) { 0.8 * ct(i, j) } else { 0.0 };
            for (di, dj) in [(0i64, 1i64), (0, -1), (1, 0), (-1, 0)] {
                let (a, b) = (i as i64 - di, j as i64 - dj);
                if a >= 0 && b >= 0 && interior(a as usize, b as usize) {
                    want += 0.2 * ct(a as usize, b as usize);
                }
            }
            let got = g[i * w + j] as f64;
            assert!(
                (got - want).abs() <= 1e-5 * want.abs().max(1.0),
                "({i}, {j}): {got} vs {want}"
            );
        }
    }
}

#[test]
fn many_steps_of_diffusion_match_finite_differences() {
    let _s = serial();
    let lap = kiln::stencil(|a: &Rel<f64>| {
        a.at([0, 1]) + a.at([0, -1]) + a.at([1, 0]) + a.at([-1, 0]) - 4.0 * a.at([0, 0])
    })
    .boundary(Boundary::Nearest);
    check(
        &[rand(30, 6)],
        |x| {
            let mut u = Tensor::from_array(x[0].clone(), &[5, 6]);
            for _ in 0..12 {
                u = &u + &(lap.apply(&u).unwrap() * 0.2);
                u = &u * &u * 0.5 + &u * 0.5; // a nonlinear step between stencils
            }
            u.array().clone()
        },
        1e-5,
    );
}

#[test]
fn a_captured_array_read_at_other_lanes_is_refused_without_leaks() {
    let _s = serial();
    no_leak(|| {
        // a captured array with a gradient of neither one element nor one per lane
        let mut wgt = Float64::from_slice(&[2.0, 3.0]);
        wgt.enable_grad();
        let x = Tensor::<f64>::arange(5);
        // a reduction of the taps mixes lanes: refused, naming the fix
        let k = kiln::stencil(|a: &Rel<f64>| a.at([1]) * (a.at([0]) * &wgt.sum()).sum());
        let e = k.apply(&x).map(|_| ()).unwrap_err();
        assert!(e.to_string().contains("outside"), "{e}");
    });
}

/// Reads at value-dependent offsets (`at_var`) in a differentiated application: recorded as
/// gathers (reverse, forward and finite differences agree, every boundary mode, offsets that
/// the neighbourhood clamps among them).
#[test]
fn at_var_reads_are_differentiated() {
    let _s = serial();
    no_leak(|| {
        for mode in MODES {
            let n = 7;
            let off = Int64::from_slice(&[1, -1, 2, 0, -3, 1, 1]);
            let k = kiln::stencil(|r: &Rel<f64>| {
                r.at_var(&[&off]) * r.at([0]) + (r.at_var(&[&(&off * -1i64)]) * 0.5).sin()
            })
            .neighborhood(&[(-2, 2)])
            .boundary(mode);
            check(
                &[rand(n, 130)],
                |x| {
                    k.apply(&Tensor::from_array(x[0].clone(), &[n]))
                        .unwrap()
                        .array()
                        .clone()
                },
                1e-6,
            );
        }
    });
}

/// A kernel that captures arrays with gradients — a one-element weight and a per-lane field —
/// differentiates in them too: reverse, forward and finite differences agree in every boundary
/// mode, with and without a gradient on the relatively indexed input, in one and two dimensions.
#[test]
fn captured_weights_and_fields_match_finite_differences() {
    let _s = serial();
    for mode in MODES {
        for shape in [vec![1usize], vec![7], vec![4, 5]] {
            let n: usize = shape.iter().product();
            let tap = |a: &Rel<f64>, o: i64| {
                if shape.len() == 1 {
                    a.at([o])
                } else {
                    a.at([o, -1])
                }
            };
            // x[0]: the input, x[1]: a weight, x[2]: a field
            let f = |x: &[Float64], u: &Float64| {
                let (w, kf) = (&x[1], &x[2]);
                let k = kiln::stencil(|a: &Rel<f64>| {
                    (tap(a, 1) * w + tap(a, -1) * tap(a, 0)).sin() * kf + w * w * tap(a, 0)
                        - kf * 0.5
                })
                .boundary(mode);
                k.apply(&Tensor::from_array(u.clone(), &shape))
                    .unwrap()
                    .array()
                    .clone()
            };
            let xs = [rand(n, 70 + n as u64), vec![0.7], rand(n, 71)];
            check(&xs, |x| f(x, &x[0]), 1e-6);
            // only the captured arrays carry gradients
            let u = Float64::from_slice(&rand(n, 72));
            check(
                &xs[1..],
                |x| f(&[u.clone(), x[0].clone(), x[1].clone()], &u),
                1e-6,
            );
        }
    }
}

/// Weights read from a captured array inside the kernel — an element (`Tensor::get`), a sum, a
/// gather per lane — are constants to the kernel's lanes: their gradients reach the array.
#[test]
fn weights_read_from_a_captured_array_inside_the_kernel() {
    let _s = serial();
    no_leak(|| {
        let n = 6;
        let idx = UInt32::from_slice(&[2, 0, 1, 1, 0, 2]);
        let f = |x: &[Float64]| {
            let w = Tensor::from_array(x[1].clone(), &[3]);
            let k = kiln::stencil(|a: &Rel<f64>| {
                a.at([1]) * w.get(&[0]) + a.at([-1]) * w.array().sum()
                    - (a.at([0]) * kiln::gather(w.array(), &idx)).sin()
            })
            .boundary(Boundary::Wrap);
            k.apply(&Tensor::from_array(x[0].clone(), &[n]))
                .unwrap()
                .array()
                .clone()
        };
        check(&[rand(n, 85), vec![0.3, -0.8, 1.1]], f, 1e-6);
        // one array read directly and through a sum or a permuting gather of it: each path
        // counted once (a forward pass from the array must stop at the nodes made from it)
        let rev = UInt32::from_slice(&[5, 4, 3, 2, 1, 0]);
        let g = |x: &[Float64]| {
            let (w, fl) = (&x[1], &x[2]);
            let k = kiln::stencil(|a: &Rel<f64>| {
                a.at([1]) * w
                    + a.at([0]) * w.sum() * w
                    + a.at([0]) * fl
                    + a.at([1]) * kiln::gather(fl, &rev)
            })
            .boundary(Boundary::Wrap);
            k.apply(&Tensor::from_array(x[0].clone(), &[n]))
                .unwrap()
                .array()
                .clone()
        };
        check(&[rand(n, 86), vec![0.5], rand(n, 87)], g, 1e-6);
    });
}

/// A kernel whose value reads no tap (only a weight), with the `Skip` border: forward mode
/// gives the one-lane tangent on every interior lane (it once failed joining 1 lane with n).
#[test]
fn a_value_of_weights_alone_in_forward_mode() {
    let _s = serial();
    no_leak(|| {
        let mut w = Float64::from_slice(&[0.4]);
        w.enable_grad();
        let x = Float64::from_slice(&[1.0, 2.0, 3.0, 4.0]);
        let k = kiln::stencil(|a: &Rel<f64>| {
            let _ = a.at([1]);
            &w * 2.0
        });
        let y = k.apply(&Tensor::from_array(x, &[4])).unwrap();
        assert_eq!(y.array().to_vec(), vec![0.8, 0.8, 0.8, 0.0]);
        kiln::ad::forward(&w).unwrap();
        assert_eq!(y.array().grad().to_vec(), vec![2.0, 2.0, 2.0, 0.0]);
        let (_, t) = kiln::jvp(
            |w: &Float64| {
                let k = kiln::stencil(|a: &Rel<f64>| {
                    let _ = a.at([1]);
                    w * 2.0
                });
                k.apply(&Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[4]))
                    .unwrap()
                    .array()
                    .clone()
            },
            &Float64::from_slice(&[0.4]),
            &Float64::from_slice(&[1.0]),
        )
        .unwrap();
        assert_eq!(t.to_vec(), vec![2.0, 2.0, 2.0, 0.0]);
    });
}

/// A weight captured by a stencil applied many times (a diffusion coefficient through 30 heat
/// steps) gets the sum of every step's contribution; f32 inputs with an f64 weight; no leak.
#[test]
fn a_weight_through_many_steps_and_mixed_types() {
    let _s = serial();
    no_leak(|| {
        let n = 6;
        let u0: Vec<f64> = rand(n * n, 80);
        let loss = |alpha: &Float64| -> Float64 {
            let k = kiln::stencil(|a: &Rel<f64>| {
                a.at([0, 0])
                    + (a.at([0, 1]) + a.at([0, -1]) + a.at([1, 0]) + a.at([-1, 0])
                        - a.at([0, 0]) * 4.0)
                        * alpha
            })
            .boundary(Boundary::Reflect);
            let mut u = Tensor::from_vec(u0.clone(), &[n, n]);
            for _ in 0..30 {
                u = k.apply(&u).unwrap();
            }
            (u.array() * u.array()).sum()
        };
        let a0 = 0.11;
        let mut alpha = Float64::scalar(a0);
        alpha.enable_grad();
        loss(&alpha).backward();
        let g = alpha.grad().item();
        let h = 1e-6;
        let fd = (loss(&Float64::scalar(a0 + h)).item() - loss(&Float64::scalar(a0 - h)).item())
            / (2.0 * h);
        assert!((g - fd).abs() <= 1e-6 * (1.0 + fd.abs()), "{g} vs {fd}");
        // an f32 field with an f64 weight: the weight's gradient in f64, the field's in f32
        let mut w = Float64::scalar(1.5);
        w.enable_grad();
        let mut x = Float32::from_slice(&[1.0, 2.0, 3.0, 4.0]);
        x.enable_grad();
        let k = kiln::stencil(|a: &Rel<f32>| a.at([1]) * &w.cast::<f32>());
        let y = k.apply(&Tensor::from_array(x.clone(), &[4])).unwrap();
        y.array().sum().backward();
        // Skip: the last lane keeps 0, lanes 0..3 read x[1..4]
        assert_eq!(w.grad().to_vec(), vec![9.0]);
        assert_eq!(x.grad().to_vec(), vec![0.0, 1.5, 1.5, 1.5]);
    });
}

#[test]
fn gradients_leave_nothing_behind() {
    let _s = serial();
    let vars = kiln::stats().vars_alive;
    no_leak(|| {
        for mode in MODES {
            let mut x = Float64::from_slice(&rand(48, 2));
            x.enable_grad();
            let k = kiln::stencil(kernel_2d).boundary(mode);
            let y = k.apply(&Tensor::from_array(x.clone(), &[6, 8])).unwrap();
            y.array().sum().backward();
            let g = x.grad().to_vec();
            assert!(g.iter().all(|v| v.is_finite()) && g.iter().any(|&v| v != 0.0));
        }
    });
    assert_eq!(kiln::stats().vars_alive, vars, "arrays leaked");
}

/// Second and third derivatives through stencils (inside `kiln::hvp` and nested
/// transformations the application is recorded as gathers): `H v` against central differences
/// of the first-order gradient along `v`, in every boundary mode, 1-d and 2-d, with a captured
/// weight; `jvp` over `hvp` for the third; nothing leaks.
#[test]
fn higher_derivatives_through_stencils_match_finite_differences() {
    let _s = serial();
    no_leak(|| {
        for mode in MODES {
            for shape in [vec![5usize], vec![3, 4]] {
                let n: usize = shape.iter().product();
                let w = Float64::from_slice(&[0.8]);
                let f = |x: &Float64| -> Float64 {
                    let t = Tensor::from_array(x.clone(), &shape);
                    let y = if shape.len() == 1 {
                        kiln::stencil(|a: &Rel<f64>| kernel_1d(a) * &w)
                            .boundary(mode)
                            .apply(&t)
                    } else {
                        kiln::stencil(|a: &Rel<f64>| kernel_2d(a) * &w)
                            .boundary(mode)
                            .apply(&t)
                    };
                    let y = y.unwrap();
                    (y.array() * y.array()).sum()
                };
                let x0 = rand(n, 100 + n as u64);
                let v = Float64::from_slice(&rand(n, 101));
                let x = Float64::from_slice(&x0);
                let hv = kiln::hvp(f, &x, &v).unwrap().to_vec();
                let grad_at = |x: &Float64| kiln::grad(f, x).unwrap();
                let h = 1e-5;
                let along = |s: f64| {
                    let xs: Vec<f64> = x0.iter().zip(v.to_vec()).map(|(a, b)| a + s * b).collect();
                    grad_at(&Float64::from_slice(&xs)).to_vec()
                };
                let (up, dn) = (along(h), along(-h));
                for i in 0..n {
                    let want = (up[i] - dn[i]) / (2.0 * h);
                    assert!(
                        (hv[i] - want).abs() <= 1e-5 * (1.0 + want.abs()),
                        "{mode:?} {shape:?} lane {i}: H v {} vs {want}",
                        hv[i]
                    );
                }
                // third: the derivative of H v along v, against differences of H v (two modes:
                // the recorded path is the same for all)
                if !matches!(mode, Boundary::Skip | Boundary::Reflect) {
                    continue;
                }
                let hvp_at = |x: &Float64| kiln::hvp(f, x, &v).unwrap();
                let (_, third) = kiln::jvp(|x: &Float64| hvp_at(x), &x, &v).unwrap();
                let third = third.to_vec();
                let hv_along = |s: f64| {
                    let xs: Vec<f64> = x0.iter().zip(v.to_vec()).map(|(a, b)| a + s * b).collect();
                    hvp_at(&Float64::from_slice(&xs)).to_vec()
                };
                let (up, dn) = (hv_along(h), hv_along(-h));
                for i in 0..n {
                    let want = (up[i] - dn[i]) / (2.0 * h);
                    assert!(
                        (third[i] - want).abs() <= 1e-4 * (1.0 + want.abs()),
                        "{mode:?} {shape:?} lane {i}: third {} vs {want}",
                        third[i]
                    );
                }
            }
        }
    });
}

#[test]
fn a_frozen_step_replays_forward_and_backward() {
    let _s = serial();
    let lap = kiln::stencil(|a: &Rel<f64>| a.at([1]) + a.at([-1]) - 2.0 * a.at([0]));
    let mut step = kiln::freeze(move |x: &Float64| -> Float64 {
        let mut x = x.detach();
        x.enable_grad();
        let y = lap.apply(&Tensor::from_array(x.clone(), &[8])).unwrap();
        let loss = (y.array() * y.array()).sum();
        loss.backward();
        x.grad()
    });
    for seed in 0..4 {
        let x0 = rand(8, 40 + seed);
        let g = step.call(&Float64::from_slice(&x0)).unwrap().to_vec();
        // loss = Σ_{1..6} (x_{i+1} + x_{i-1} − 2 x_i)²
        let mut want = [0.0; 8];
        for i in 1..7 {
            let r = x0[i + 1] + x0[i - 1] - 2.0 * x0[i];
            want[i + 1] += 2.0 * r;
            want[i - 1] += 2.0 * r;
            want[i] -= 4.0 * r;
        }
        for i in 0..8 {
            assert!(
                (g[i] - want[i]).abs() < 1e-12,
                "call {seed} lane {i}: {} vs {}",
                g[i],
                want[i]
            );
        }
    }
    assert_eq!(step.stats().replays, 3, "the later calls replay");
}

/// A frozen training step whose stencil captures the weights it differentiates (a diffusion
/// coefficient and a per-lane source field) replays forward and backward: the same gradients
/// as unfrozen calls, from the replays too; `kiln::grad` (JAX's face) agrees.
#[test]
fn a_frozen_step_differentiates_captured_weights() {
    let _s = serial();
    let n = 8usize;
    let grads = |alpha: &Float64, src: &Float64, u: &Float64| -> (Float64, Float64) {
        let (mut a, mut s) = (alpha.detach(), src.detach());
        a.enable_grad();
        s.enable_grad();
        let k = kiln::stencil(|r: &Rel<f64>| {
            r.at([0]) + (r.at([1]) + r.at([-1]) - r.at([0]) * 2.0) * &a + &s * r.at([0]).cos()
        })
        .boundary(Boundary::Nearest);
        let mut t = Tensor::from_array(u.clone(), &[n]);
        for _ in 0..3 {
            t = k.apply(&t).unwrap();
        }
        (t.array() * t.array()).sum().backward();
        (a.grad(), s.grad())
    };
    let mut step =
        kiln::freeze(move |alpha: &Float64, src: &Float64, u: &Float64| grads(alpha, src, u));
    for call in 0..4u64 {
        let alpha = Float64::from_slice(&[0.1 + 0.05 * call as f64]);
        let src = Float64::from_slice(&rand(n, 90 + call));
        let u = Float64::from_slice(&rand(n, 95 + call));
        let (ga, gs) = step.call(&alpha, &src, &u).unwrap();
        let (wa, ws) = grads(&alpha, &src, &u);
        assert_eq!(
            ga.to_vec(),
            wa.to_vec(),
            "call {call}: the weight's gradient"
        );
        assert_eq!(
            gs.to_vec(),
            ws.to_vec(),
            "call {call}: the field's gradient"
        );
        // JAX's face: the gradient of the loss in alpha
        let loss = |a: &Float64| -> Float64 {
            let k = kiln::stencil(|r: &Rel<f64>| {
                r.at([0]) + (r.at([1]) + r.at([-1]) - r.at([0]) * 2.0) * a + &src * r.at([0]).cos()
            })
            .boundary(Boundary::Nearest);
            let mut t = Tensor::from_array(u.clone(), &[n]);
            for _ in 0..3 {
                t = k.apply(&t).unwrap();
            }
            (t.array() * t.array()).sum()
        };
        let gj = kiln::grad(loss, &alpha).unwrap().item();
        assert!(
            (gj - wa.item()).abs() <= 1e-12 * (1.0 + gj.abs()),
            "{gj} vs {}",
            wa.item()
        );
    }
    assert_eq!(
        step.stats().replays,
        3,
        "the later calls replay: {:?}",
        step.stats().retraces
    );
}

#[test]
fn a_kernel_with_captured_fields_without_gradients() {
    let _s = serial();
    // spatially varying coefficients (no gradient) captured by the kernel: the adjoint must read
    // them where the forward did, at the lane that read the tap
    for mode in MODES {
        for shape in [vec![7usize], vec![4, 5]] {
            let n: usize = shape.iter().product();
            let w = Float64::from_slice(&rand(n, 31));
            let w2 = Float64::from_slice(&rand(n, 32));
            let one = |a: &Rel<f64>, o: i64| {
                if shape.len() == 1 {
                    a.at([o])
                } else {
                    a.at([o, 1])
                }
            };
            let k =
                kiln::stencil(|a: &Rel<f64>| one(a, 1) * &w + (one(a, -1) * one(a, 0)).sin() * &w2)
                    .boundary(mode);
            check(
                &[rand(n, 33)],
                |x| {
                    let t = Tensor::from_array(x[0].clone(), &shape);
                    k.apply(&t).unwrap().array().clone()
                },
                1e-6,
            );
        }
    }
}

#[test]
fn a_kernel_that_mixes_lanes_is_refused() {
    let _s = serial();
    no_leak(|| {
        let mut x = Float64::from_slice(&[1.0, 2.0, 3.0, 4.0]);
        x.enable_grad();
        let k = kiln::stencil(|a: &Rel<f64>| a.at([0]) * a.at([1]).sum());
        let e = k.apply(&Tensor::from_array(x.clone(), &[4])).unwrap_err();
        assert!(e.to_string().contains("lanes"), "{e}");
        // without a gradient it runs
        assert!(k.apply(&Tensor::from_array(x.detach(), &[4])).is_ok());
    });
}

/// Every backend (the interpreter as the oracle, Cranelift's 4-lane vectors, LLVM at this host's
/// width) computes the same gradients through a split stencil (affine and not, a folding border),
/// a loop and a scan: the kernels these passes build are covered at more than one width.
#[test]
fn every_backend_agrees_on_the_new_gradients() {
    use kiln_core::{with_backend, BackendKind};
    let _s = serial();
    let mut kinds = vec![BackendKind::Interp, BackendKind::Cranelift];
    if kiln_core::backend::llvm::shared().is_ok() {
        kinds.push(BackendKind::Llvm);
    }
    let (h, w) = (9usize, 70usize);
    let x0 = rand(h * w, 61);
    let run = || -> Vec<f64> {
        let mut x = Float64::from_slice(&x0);
        x.enable_grad();
        let lap = kiln::stencil(|a: &Rel<f64>| {
            a.at([0, 1]) + a.at([0, -1]) + a.at([1, 0]) + a.at([-1, 0]) - 4.0 * a.at([0, 0])
        });
        let u = Tensor::from_array(x.clone(), &[h, w]);
        let u = &u + &(lap.apply(&u).unwrap() * 0.2);
        let u = kiln::stencil(kernel_2d)
            .boundary(Boundary::Reflect)
            .apply(&u)
            .unwrap();
        // a loop and a scan over the stencil's result
        let (y, _) = kiln::while_loop(
            (u.array().clone(), kiln::UInt32::zeros(h * w)),
            |(_, i)| i.lt(3u32),
            |(y, i)| ((y * 0.5).sin() + y * 0.1, i + 1u32),
        )
        .unwrap();
        let rows = Tensor::from_array(y, &[h, w]);
        let (c, _) = kiln::scan(&Tensor::<f64>::zeros(&[w]), &rows, |c, r| {
            let c2 = (&(c * 0.9) + r).tanh();
            (c2.clone(), c2)
        })
        .unwrap();
        c.array().sum().backward();
        x.grad().to_vec()
    };
    let results: Vec<Vec<f64>> = kinds.iter().map(|&k| with_backend(k, run)).collect();
    for (k, r) in kinds.iter().zip(&results).skip(1) {
        for (i, (a, b)) in r.iter().zip(&results[0]).enumerate() {
            assert!(
                (a - b).abs() <= 1e-9 * (1.0 + b.abs()),
                "{k:?} lane {i}: {a} vs the interpreter's {b}"
            );
        }
    }
}
