//! Tiled launches (a transposed source, run in narrow tall tiles) against the host result on every
//! backend: shapes whose columns are not a multiple of the 16-lane segment, whose rows are not a
//! multiple of the band, and the smallest tiled shape. The interpreter is the oracle; Cranelift
//! and LLVM (where a libLLVM is found) must agree with it bit for bit.

mod common;
use common::{delta, leak_checked};
use kiln::prelude::*;
use kiln_core::{self as core, BackendKind};

/// `t.transpose() * 2 + 1` for a `rows × cols` source, computed on the host.
fn expected(rows: usize, cols: usize, data: &[f32]) -> Vec<f32> {
    let mut out = vec![0.0; rows * cols];
    for i in 0..cols {
        for j in 0..rows {
            out[i * rows + j] = data[j * cols + i] * 2.0 + 1.0;
        }
    }
    out
}

fn backends() -> Vec<BackendKind> {
    let mut b = vec![BackendKind::Interp, BackendKind::Cranelift];
    if core::backend::llvm::shared().is_ok() {
        b.push(BackendKind::Llvm);
    }
    b
}

#[test]
fn transposed_sources_agree_on_every_backend() {
    leak_checked(|| {
        // (rows, cols) of the source; the output is cols × rows
        for (rows, cols) in [
            (64, 64),
            (68, 100),
            (100, 68),
            (76, 1030),
            (1100, 64),
            (64, 260),
        ] {
            let data: Vec<f32> = (0..rows * cols)
                .map(|i| ((i * 7919) % 1013) as f32 * 0.5)
                .collect();
            let want = expected(rows, cols, &data);
            for backend in backends() {
                let got = core::with_backend(backend, || {
                    let t = Tensor::from_slice(&data, &[rows, cols]);
                    t.eval();
                    let y = t.transpose() * 2.0 + 1.0;
                    let (_, d) = delta(|| y.eval().clone());
                    assert_eq!(d.launches, 1, "{backend:?} {rows}x{cols}: {d:?}");
                    y.to_vec()
                });
                assert_eq!(got, want, "{backend:?}: transpose of {rows}x{cols}");
            }
        }
    });
}
