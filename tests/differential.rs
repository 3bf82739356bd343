//! Differential property test of the whole pipeline: random programs traced through the public
//! engine API (random expression DAGs over every op and type, gathers included), evaluated once with
//! the reference interpreter and once with Cranelift, must give the same bits (any NaN equals any
//! NaN). Sizes cover 0, 1, vector-width remainders and the 16 384-lane block boundary ±1.

mod common;
use kiln_core::{self as core, BackendKind, Op, VarId, VarType};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Node {
    Input(VarType, Vec<u64>),
    Lit(VarType, u64),
    Index(VarType),
    Unary(Op, usize),
    Binary(Op, usize, usize),
    Fma(usize, usize, usize),
    Select(usize, usize, usize),
    Cast(usize, VarType),
    Bitcast(usize, VarType),
    Gather(usize, usize),
    /// A view: any earlier node (lazy expressions included) gathered at an integer node.
    View(usize, usize),
}

const SPECIAL_F32: [f32; 8] = [
    0.0,
    -0.0,
    1.0,
    -1.5,
    f32::NAN,
    f32::INFINITY,
    f32::NEG_INFINITY,
    1e30,
];
const SPECIAL_F64: [f64; 8] = [
    0.0,
    -0.0,
    1.0,
    -1.5,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    1e300,
];

fn special(ty: VarType, k: usize, raw: u64) -> u64 {
    match ty {
        VarType::F32 => {
            if k < 8 {
                SPECIAL_F32[k].to_bits() as u64
            } else {
                (((raw % 2000) as f32 - 1000.0) / 7.0).to_bits() as u64
            }
        }
        VarType::F64 => {
            if k < 8 {
                SPECIAL_F64[k].to_bits()
            } else {
                (((raw % 2000) as f64 - 1000.0) / 7.0).to_bits()
            }
        }
        VarType::Bool => raw & 1,
        _ => match k {
            0 => 0,
            1 => ty.bit_mask(),        // -1 / MAX
            2 => 1 << (ty.bits() - 1), // MIN for signed
            3 => 1,
            _ => (raw % 64).wrapping_sub(16) & ty.bit_mask(),
        },
    }
}

/// A random program of `len` nodes over `n` lanes; node types are tracked so every op is well typed.
fn program(n: usize, seed: u64, len: usize) -> Vec<Node> {
    let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut nodes: Vec<Node> = Vec::new();
    let mut types: Vec<VarType> = Vec::new();
    let pick_ty = |r: u64| VarType::ALL[(r % 7) as usize];
    for _ in 0..3 {
        let ty = pick_ty(next());
        let data: Vec<u64> = (0..n)
            .map(|_| {
                let r = next();
                special(ty, (r % 24) as usize, r >> 8)
            })
            .collect();
        nodes.push(Node::Input(ty, data));
        types.push(ty);
    }
    while nodes.len() < len {
        let r = next();
        let a = (next() as usize) % nodes.len();
        let ta = types[a];
        let same = |want: VarType, next: &mut dyn FnMut() -> u64| -> Option<usize> {
            let cands: Vec<usize> = (0..types.len()).filter(|&i| types[i] == want).collect();
            (!cands.is_empty()).then(|| cands[(next() as usize) % cands.len()])
        };
        let (node, ty) = match r % 13 {
            0 => {
                let ty = pick_ty(next());
                let k = (next() % 12) as usize;
                (Node::Lit(ty, special(ty, k, next())), ty)
            }
            1 => {
                let ty =
                    [VarType::I32, VarType::U32, VarType::I64, VarType::U64][(next() % 4) as usize];
                (Node::Index(ty), ty)
            }
            2 | 3 => {
                let ops: &[Op] = if ta.is_float() {
                    &[
                        Op::Neg,
                        Op::Abs,
                        Op::Sqrt,
                        Op::Floor,
                        Op::Ceil,
                        Op::Round,
                        Op::Trunc,
                    ]
                } else if ta.is_bool() {
                    &[Op::Not]
                } else {
                    &[Op::Neg, Op::Not, Op::Abs]
                };
                (Node::Unary(ops[(next() as usize) % ops.len()], a), ta)
            }
            4..=6 => {
                let b = same(ta, &mut next).unwrap_or(a);
                let ops: &[Op] = if ta.is_float() {
                    &[
                        Op::Add,
                        Op::Sub,
                        Op::Mul,
                        Op::Div,
                        Op::Min,
                        Op::Max,
                        Op::Lt,
                        Op::Le,
                        Op::Gt,
                        Op::Ge,
                        Op::Eq,
                        Op::Ne,
                    ]
                } else if ta.is_bool() {
                    &[Op::And, Op::Or, Op::Xor, Op::Eq, Op::Ne]
                } else {
                    &[
                        Op::Add,
                        Op::Sub,
                        Op::Mul,
                        Op::Div,
                        Op::Rem,
                        Op::Min,
                        Op::Max,
                        Op::And,
                        Op::Or,
                        Op::Xor,
                        Op::Shl,
                        Op::Shr,
                        Op::Lt,
                        Op::Ge,
                        Op::Eq,
                        Op::Ne,
                    ]
                };
                let op = ops[(next() as usize) % ops.len()];
                (
                    Node::Binary(op, a, b),
                    if op.is_comparison() {
                        VarType::Bool
                    } else {
                        ta
                    },
                )
            }
            7 if !ta.is_bool() => {
                let b = same(ta, &mut next).unwrap_or(a);
                let c = same(ta, &mut next).unwrap_or(a);
                (Node::Fma(a, b, c), ta)
            }
            8 => match same(VarType::Bool, &mut next) {
                Some(m) => {
                    let b = same(ta, &mut next).unwrap_or(a);
                    (Node::Select(m, a, b), ta)
                }
                None => continue,
            },
            9 => {
                let to = pick_ty(next());
                (Node::Cast(a, to), to)
            }
            // NaN sign and payload bits are unspecified (as in Rust), so only reinterpret values
            // whose bits every backend agrees on: integers and unmodified float inputs
            10 if ta.is_int() || (ta.is_float() && matches!(nodes[a], Node::Input(..))) => {
                let to = match ta.size_bytes() {
                    4 => [VarType::I32, VarType::U32, VarType::F32][(next() % 3) as usize],
                    _ => [VarType::I64, VarType::U64, VarType::F64][(next() % 3) as usize],
                };
                (Node::Bitcast(a, to), to)
            }
            12 => {
                let ints: Vec<usize> = (0..types.len()).filter(|&i| types[i].is_int()).collect();
                if ints.is_empty() {
                    continue;
                }
                let idx = ints[(next() as usize) % ints.len()];
                (Node::View(a, idx), ta)
            }
            11 => match (0..3).find(|&i| types[i].is_int()) {
                Some(idx) => {
                    let src = (next() as usize) % 3;
                    (Node::Gather(src, idx), types[src])
                }
                None => continue,
            },
            _ => continue,
        };
        nodes.push(node);
        types.push(ty);
    }
    nodes
}

fn bytes_of(ty: VarType, data: &[u64]) -> Vec<u8> {
    data.iter()
        .flat_map(|v| v.to_le_bytes()[..ty.size_bytes()].to_vec())
        .collect()
}

/// Trace the program and evaluate its last `roots` nodes together; returns (type, bytes) per root.
fn run(
    nodes: &[Node],
    n: usize,
    roots: usize,
    backend: BackendKind,
    views: bool,
) -> Vec<(VarType, Vec<u8>)> {
    core::with_backend(backend, || {
        let mut ids: Vec<VarId> = Vec::new();
        for node in nodes {
            let id = match node {
                Node::Input(ty, data) => core::from_bytes(*ty, &bytes_of(*ty, data)).unwrap(),
                Node::Lit(ty, bits) => core::literal(*ty, *bits, 1),
                Node::Index(ty) => core::counter(*ty, n).unwrap(),
                Node::Unary(op, a) => core::op(*op, &[ids[*a]]).unwrap(),
                Node::Binary(op, a, b) => core::op(*op, &[ids[*a], ids[*b]]).unwrap(),
                Node::Fma(a, b, c) => core::op(Op::Fma, &[ids[*a], ids[*b], ids[*c]]).unwrap(),
                Node::Select(m, a, b) => {
                    core::op(Op::Select, &[ids[*m], ids[*a], ids[*b]]).unwrap()
                }
                Node::Cast(a, to) => core::convert(Op::Cast, ids[*a], *to).unwrap(),
                Node::Bitcast(a, to) => core::convert(Op::Bitcast, ids[*a], *to).unwrap(),
                Node::Gather(src, idx) => {
                    let mask = core::literal(VarType::Bool, 1, 1);
                    let g = core::gather(ids[*src], ids[*idx], mask).unwrap();
                    core::dec_ref(mask);
                    g
                }
                Node::View(src, idx) => {
                    // the same value either way: recomputed in the consumer, or evaluated first
                    let mask = core::literal(VarType::Bool, 1, 1);
                    let g = if views {
                        core::gather_view(ids[*src], ids[*idx], mask)
                    } else {
                        core::gather(ids[*src], ids[*idx], mask)
                    };
                    core::dec_ref(mask);
                    g.unwrap()
                }
            };
            ids.push(id);
        }
        let root_ids: Vec<VarId> = ids[ids.len() - roots..].to_vec();
        core::eval(&root_ids).unwrap();
        let out = root_ids
            .iter()
            .map(|&r| (core::var_type(r), core::read_bytes(r).unwrap()))
            .collect();
        for id in ids {
            core::dec_ref(id);
        }
        out
    })
}

fn same_bits(ty: VarType, a: &[u8], b: &[u8]) -> Result<(), String> {
    if a.len() != b.len() {
        return Err(format!("lengths {} vs {}", a.len(), b.len()));
    }
    let w = ty.size_bytes();
    for (i, (x, y)) in a.chunks(w).zip(b.chunks(w)).enumerate() {
        let nan = |c: &[u8]| match ty {
            VarType::F32 => f32::from_le_bytes(c.try_into().unwrap()).is_nan(),
            VarType::F64 => f64::from_le_bytes(c.try_into().unwrap()).is_nan(),
            _ => false,
        };
        if x != y && !(nan(x) && nan(y)) {
            return Err(format!("lane {i}: oracle {x:?} vs {y:?} ({ty})"));
        }
    }
    Ok(())
}

fn check(n: usize, seed: u64, len: usize, roots: usize) -> Result<(), TestCaseError> {
    let prog = program(n, seed, len);
    let roots = roots.min(prog.len() - 3).max(1);
    // the oracle: the interpreter with every view evaluated first
    let a = run(&prog, n, roots, BackendKind::Interp, false);
    let mut others = vec![
        (BackendKind::Cranelift, false),
        (BackendKind::Interp, true),
        (BackendKind::Cranelift, true),
    ];
    // LLVM too, where this machine has a libLLVM (backend_diff.rs says when it is skipped), on one
    // program in eight: its compiles cost ~15 ms each, and kiln-core's backend_diff tests it in depth
    if seed % 8 == 0 && kiln_core::backend::llvm::shared().is_ok() {
        others.extend([(BackendKind::Llvm, false), (BackendKind::Llvm, true)]);
    }
    for (backend, views) in others {
        let b = run(&prog, n, roots, backend, views);
        for (k, ((ta, xa), (_, xb))) in a.iter().zip(&b).enumerate() {
            if let Err(e) = same_bits(*ta, xa, xb) {
                return Err(TestCaseError::fail(format!(
                    "root {k} of program {prog:?}\n(n={n}, seed={seed}, {backend}, lazy views {views}): {e}"
                )));
            }
        }
    }
    Ok(())
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0usize),
        Just(1),
        Just(2),
        Just(3),
        Just(4),
        Just(5),
        Just(7),
        Just(8),
        Just(9),
        2usize..100,
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]
    #[test]
    fn small_programs_agree(n in size(), seed in any::<u64>(), len in 4usize..30, roots in 1usize..4) {
        common::leak_checked(|| check(n, seed, len, roots))?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]
    #[test]
    fn block_boundaries_agree(n in prop_oneof![Just(16_383usize), Just(16_384), Just(16_385), Just(32_769), 16_000usize..40_000], seed in any::<u64>(), len in 4usize..25) {
        common::leak_checked(|| check(n, seed, len, 2))?;
    }
}
