//! The analysis trace: the body traced once, symbolically, with placeholders for the step number,
//! the sequence rows and the earlier outputs. Nothing runs; the traced graph tells what each
//! output depends on (the connection pattern, captured arrays, loop-invariant work), whether the
//! body treats the lanes of a row independently (one kernel) or needs other lanes' values
//! (stepped), and which matrix products read a sequence row against a loop-invariant matrix.

use super::erased::Erased;
use super::hook::{Hook, Installed, Seen};
use super::spec::{seq_span, Spec, StepIn, StepOut};
use crate::control::{Owned, Trace};
use kiln_core::control as cc;
use kiln_core::{inspect, Error, Op, Result, VarId, VarType};
use std::collections::{HashMap, HashSet};

/// What a node depends on: bit `i` for input `i` (see [`Inputs`]), plus the step number.
type Deps = u128;

/// Outer inputs in connection order: sequences, initial states, non-sequences, captured arrays.
pub(crate) struct Inputs {
    pub names: Vec<String>,
}

pub(crate) struct Analysis {
    /// Per output: type and row shape.
    pub out_types: Vec<VarType>,
    pub out_rows: Vec<Vec<usize>>,
    pub until: bool,
    /// A request the body made that needs other lanes' values: (array, what).
    pub refusal: Option<(String, String)>,
    pub captured: Vec<Erased>,
    pub captured_names: Vec<String>,
    pub inputs: Inputs,
    pub connection: Vec<Vec<bool>>,
    /// No output (nor `until`) depends on the step, a sequence or an earlier output.
    pub invariant: bool,
    pub ops_invariant: usize,
    pub ops_in_loop: usize,
    /// Declared inputs nothing depends on: (what, index).
    pub unused: Vec<String>,
    /// Per matrix product, in call order: what the rewrites may do with it.
    pub products: Vec<Product>,
    /// Outputs that are the very same traced value as an earlier output: (later, earlier).
    pub same_outputs: Vec<(usize, usize)>,
    /// The body has side effects (a scatter into an array it captured).
    pub effects: bool,
    /// Declared inputs the body reads as arrays of their own (variable ids), beside what its
    /// step inputs give it.
    pub reads_inputs: Vec<u32>,
}

/// A matrix product of the body, as the analysis saw it.
pub(crate) struct Product {
    /// `Some((seq, tap))` when the left operand is that sequence row as given.
    pub row_of: Option<(usize, i64)>,
    /// The right operand (a lazy expression of data only) when it is loop-invariant.
    pub invariant_b: Option<Erased>,
    /// Ops in the right operand's expression (what hoisting it saves per step).
    pub b_ops: usize,
    /// The left operand is the value output `j` returns this step.
    pub a_is_output: Option<usize>,
    /// The product is exactly what output `m` returns, and nothing else in the body uses it.
    pub is_output: Option<usize>,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    /// The element type of its result.
    pub ty: VarType,
}

/// Trace `body` once symbolically and analyse what it traced.
pub(crate) fn analyze(
    spec: &Spec,
    body: &mut dyn FnMut(&StepIn) -> Result<StepOut>,
) -> Result<Analysis> {
    let label = &spec.label;
    // the step number and every row the body may read stand as placeholders
    let mut ph: Vec<VarId> = Vec::new();
    let mut what: HashMap<u32, usize> = HashMap::new(); // placeholder → input bit (128: the step)
    let mut row_tap: HashMap<u32, (usize, i64)> = HashMap::new();
    let like = spec.seqs.first().map(|s| s.data.id()).or_else(|| {
        spec.outs
            .iter()
            .find_map(|o| o.init.as_ref().map(|i| i.id()))
    });
    let new_ph = |ty: VarType, n: usize, ph: &mut Vec<VarId>| -> VarId {
        // (a literal made to stand for the shape is released with its handle)
        let made = like
            .is_none()
            .then(|| kiln_core::Handle::own(kiln_core::literal(ty, 0, n)));
        let like_id = like.unwrap_or_else(|| made.as_ref().map_or(VarId(0), |h| h.id()));
        let p = cc::placeholder(ty, n, ph.len(), like_id);
        drop(made);
        ph.push(p);
        p
    };
    let t = new_ph(VarType::U32, 1, &mut ph);
    what.insert(t.0, 127);
    let mut seq_rows = Vec::new();
    for (i, s) in spec.seqs.iter().enumerate() {
        let row: Vec<usize> = s.data.shape[1..].to_vec();
        let n: usize = row.iter().product();
        let mut rows = Vec::new();
        for &tap in &s.taps {
            let p = new_ph(s.data.ty, n, &mut ph);
            what.insert(p.0, i);
            row_tap.insert(p.0, (i, tap));
            rows.push(Erased::borrow(p, row.clone()));
        }
        seq_rows.push(rows);
    }
    let n_seq = spec.seqs.len();
    let mut names: Vec<String> = (0..n_seq).map(|i| format!("sequence {i}")).collect();
    let mut init_of = Vec::new();
    let mut out_rows = Vec::new();
    for (j, o) in spec.outs.iter().enumerate() {
        let mut rows = Vec::new();
        match (&o.init, o.row_shape()) {
            (Some(init), Some(row)) => {
                let bit = names.len();
                names.push(format!("initial state of {}", spec.out_name(j)));
                init_of.push(Some(bit));
                let n: usize = row.iter().product();
                for _ in &o.taps {
                    let p = new_ph(init.ty, n, &mut ph);
                    what.insert(p.0, bit);
                    rows.push(Erased::borrow(p, row.clone()));
                }
            }
            _ => init_of.push(None),
        }
        out_rows.push(rows);
    }
    let n_nonseq = spec.non_seqs.len();
    let first_nonseq = names.len();
    for k in 0..n_nonseq {
        names.push(format!("non-sequence {k}"));
    }
    let input = StepIn {
        t: Erased::borrow(t, vec![]),
        seq_rows,
        out_rows,
        non_seqs: spec.non_seqs.clone(),
    };
    // a scan traced inside another body: the outer trace's refusal is not ours (put back below)
    let outer_refusal = cc::take_refusal();
    // the placeholders, released however this returns (a panic in the body included)
    let ph = Owned::own(ph);
    let trace = Trace::enter()?;
    let installed = Installed::new(Hook::Analyze(Vec::new()));
    let result = body(&input);
    let seen = match installed.take() {
        Hook::Analyze(s) => s,
        Hook::Step { .. } => Vec::new(),
    };
    let effects = trace.finish();
    let refusal = cc::take_refusal();
    cc::restore_refusal(outer_refusal);
    let out = match result {
        Ok(o) => o,
        Err(e) => {
            drop(effects);
            drop(seen);
            return Err(e);
        }
    };
    let mut roots: Vec<VarId> = out.outs.iter().map(|e| e.id()).collect();
    if let Some(u) = &out.until {
        roots.push(u.id());
    }
    let has_effects = !effects.ids().is_empty();
    roots.extend(effects.ids().iter().map(|&e| VarId(e)));
    for s in &seen {
        roots.push(s.b.id());
    }
    // declared non-sequences are leaves (their own expressions are not the body's)
    let stop: Vec<VarId> = spec.non_seqs.iter().map(|e| e.id()).collect();
    let nodes = inspect::reachable(&roots, &stop);
    let nonseq_bit: HashMap<u32, usize> = spec
        .non_seqs
        .iter()
        .enumerate()
        .map(|(k, e)| (e.id().0, first_nonseq + k))
        .collect();
    let declared: HashSet<u32> = spec.input_ids().iter().map(|v| v.0).collect();
    let mut deps: HashMap<u32, Deps> = HashMap::new();
    let mut captured = Vec::new();
    let mut captured_names = Vec::new();
    let mut reads_inputs = Vec::new();
    let (mut ops_invariant, mut ops_in_loop) = (0usize, 0usize);
    let is_op = |op: Op| !matches!(op, Op::Literal | Op::Data | Op::Phi | Op::Counter);
    for n in &nodes {
        let mut d: Deps = 0;
        if let Some(&b) = nonseq_bit.get(&n.id.0) {
            d |= bit(b);
        } else if let Some(&b) = what.get(&n.id.0) {
            d |= if b == 127 { STEP } else { bit(b) };
        } else if n.op == Op::Data && !n.refused && !declared.contains(&n.id.0) {
            let b = names.len();
            let name = n
                .label
                .clone()
                .unwrap_or_else(|| format!("array {}", n.id.0));
            names.push(format!("captured `{name}`"));
            captured_names.push(name);
            captured.push(Erased::borrow(n.id, vec![n.size]));
            d |= bit(b);
        } else if n.op == Op::Data && declared.contains(&n.id.0) {
            // a declared input the body reads as an array of its own (not through its step
            // input): an initial state it also captured
            reads_inputs.push(n.id.0);
        }
        for x in &n.deps {
            d |= deps.get(&x.0).copied().unwrap_or(0);
        }
        deps.insert(n.id.0, d);
        if is_op(n.op) && !n.refused {
            if d & step_bits(spec, &init_of) == 0 {
                ops_invariant += 1;
            } else {
                ops_in_loop += 1;
            }
        } else if n.refused {
            ops_in_loop += 1;
        }
    }
    let step_mask = step_bits(spec, &init_of);
    // per output: direct inputs and the outputs it feeds back from
    let n_out = out.outs.len();
    let mut conn: Vec<Deps> = out
        .outs
        .iter()
        .map(|e| deps.get(&e.id().0).copied().unwrap_or(0))
        .collect();
    // a feedback row depends, over time, on everything its own output depends on
    loop {
        let mut changed = false;
        for m in 0..n_out {
            let mut c = conn[m];
            for (j, b) in init_of.iter().enumerate() {
                if let Some(b) = b {
                    if c & bit(*b) != 0 && j < n_out {
                        c |= conn[j];
                    }
                }
            }
            if c != conn[m] {
                conn[m] = c;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let n_in = names.len();
    let connection: Vec<Vec<bool>> = (0..n_in)
        .map(|i| (0..n_out).map(|m| conn[m] & bit(i) != 0).collect())
        .collect();
    let until_deps = out
        .until
        .as_ref()
        .map(|u| deps.get(&u.id().0).copied().unwrap_or(0))
        .unwrap_or(0);
    let used: Deps = conn.iter().fold(until_deps, |a, &c| a | c);
    let mut unused = Vec::new();
    for i in 0..n_seq {
        if used & bit(i) == 0 {
            unused.push(format!("sequence {i}"));
        }
    }
    for k in 0..n_nonseq {
        if used & bit(first_nonseq + k) == 0 {
            unused.push(format!("non-sequence {k}"));
        }
    }
    let invariant = out.until.is_none()
        && out
            .outs
            .iter()
            .all(|e| deps.get(&e.id().0).copied().unwrap_or(0) & step_mask == 0);
    let products = seen
        .iter()
        .map(|s: &Seen| {
            let bd = deps.get(&s.b.id().0).copied().unwrap_or(0);
            let invariant_b =
                (bd & step_mask == 0).then(|| Erased::borrow(s.b.id(), vec![s.k, s.n]));
            let b_ops = if invariant_b.is_some() {
                inspect::reachable(&[s.b.id()], &stop)
                    .iter()
                    .filter(|n| is_op(n.op) && !n.refused)
                    .count()
            } else {
                0
            };
            Product {
                row_of: row_tap.get(&s.a.id().0).copied(),
                invariant_b,
                b_ops,
                a_is_output: out.outs.iter().position(|e| e.id() == s.a.id()),
                is_output: out
                    .outs
                    .iter()
                    .position(|e| e.id() == s.result.id())
                    .filter(|_| {
                        let users = nodes
                            .iter()
                            .filter(|n| n.deps.contains(&s.result.id()))
                            .count();
                        let returned = out.outs.iter().filter(|e| e.id() == s.result.id()).count();
                        users == 0 && returned == 1
                    }),
                m: s.m,
                k: s.k,
                n: s.n,
                ty: kiln_core::var_type(s.result.id()),
            }
        })
        .collect();
    let mut same_outputs = Vec::new();
    for (m, e) in out.outs.iter().enumerate() {
        if let Some(first) = out.outs[..m].iter().position(|f| f.id() == e.id()) {
            same_outputs.push((m, first));
        }
    }
    let analysis = Analysis {
        out_types: out.outs.iter().map(|e| e.ty).collect(),
        out_rows: out.outs.iter().map(|e| e.shape.clone()).collect(),
        until: out.until.is_some(),
        refusal,
        captured,
        captured_names,
        inputs: Inputs { names },
        connection,
        invariant,
        ops_invariant,
        ops_in_loop,
        unused,
        products,
        same_outputs,
        effects: has_effects,
        reads_inputs,
    };
    if let Some(u) = &out.until {
        if u.numel() != 1 || u.ty != VarType::Bool {
            let d = u.describe();
            drop(out);
            drop(effects);
            drop(seen);
            drop(ph);
            return Err(Error::Scan(format!(
                "scan {label}: the `until` condition is {d}; it must be one bool (reduce a per-lane condition with `.any()` or `.all()`)"
            )));
        }
    }
    drop(out);
    drop(effects);
    drop(seen);
    drop(ph);
    // the sequences' usable lengths are already checked; keep the helper's view consistent
    let _ = seq_span;
    Ok(analysis)
}

/// The step number's bit.
const STEP: Deps = 1 << 127;

fn bit(i: usize) -> Deps {
    if i >= 126 {
        // beyond the mask's width inputs share the last bit (connection then over-approximates)
        1 << 126
    } else {
        1 << i
    }
}

/// The bits that change from step to step: the step number, sequences and feedback rows.
fn step_bits(spec: &Spec, init_of: &[Option<usize>]) -> Deps {
    let mut m: Deps = STEP;
    for i in 0..spec.seqs.len() {
        m |= bit(i);
    }
    for b in init_of.iter().flatten() {
        m |= bit(*b);
    }
    m
}
