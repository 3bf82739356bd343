//! The loop description both faces lower to, its validation (taps, step count) and the save-mem
//! plan (which steps run and which rows each output stores).

use super::erased::Erased;
use kiln_core::{Error, Result};
use std::ops::Range;

/// Which rows of an output the caller uses; save-mem stores only those and stops the loop after
/// the last step any output needs.
///
/// ```
/// use kiln::prelude::*;
/// use kiln::scan::{Keep, Scan};
/// // x + 1 from 0 for 10 steps, but only xs[-3] is used: the loop runs 8 steps
/// let r = Scan::new().output(&Tensor::scalar(0i64)).n_steps(10).keep(0, Keep::Row(-3))
///     .run(|s| s.out(0, -1) + 1i64).unwrap();
/// assert_eq!(r.output::<i64>(0).to_vec(), vec![8]);
/// assert_eq!(r.steps(), 8);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Keep {
    /// Every step's row (the default).
    All,
    /// The last `k` rows (`ys[-k:]`).
    Last(usize),
    /// Rows `a..b` (`ys[a:b]`; `b` past the end is clamped).
    Rows(Range<usize>),
    /// One row (`ys[i]`; negative counts from the end).
    Row(isize),
    /// No row: the output is unused (removed when nothing else needs it).
    Nothing,
}

#[derive(Clone)]
pub(crate) struct SeqSpec {
    pub data: Erased,
    pub taps: Vec<i64>,
}

#[derive(Clone)]
pub(crate) struct OutSpec {
    /// `None`: a NITSOT. SITSOT (taps `[-1]`): the row. MITSOT: `[window, row…]`.
    pub init: Option<Erased>,
    pub taps: Vec<i64>,
    pub keep: Keep,
    /// The caller handed the initial state over (`output_owned`).
    pub owned: bool,
}

impl OutSpec {
    /// Rows of history the output's taps need (0 for a NITSOT).
    pub fn window(&self) -> usize {
        self.taps.iter().map(|&t| (-t) as usize).max().unwrap_or(0)
    }
    /// The shape of one row (each step's value).
    pub fn row_shape(&self) -> Option<Vec<usize>> {
        let init = self.init.as_ref()?;
        Some(if self.taps == [-1] && !self.mitsot_layout() {
            init.shape.clone()
        } else {
            init.shape[1..].to_vec()
        })
    }
    /// A MITSOT-style initial state (a leading axis of `window` rows), which `output_taps` with
    /// taps other than `[-1]` requires.
    pub fn mitsot_layout(&self) -> bool {
        self.taps != [-1]
    }
}

#[derive(Clone)]
pub(crate) struct Spec {
    pub label: String,
    pub seqs: Vec<SeqSpec>,
    pub outs: Vec<OutSpec>,
    pub non_seqs: Vec<Erased>,
    pub n_steps: Option<usize>,
    /// JAX: `length` must equal every sequence's leading size.
    pub exact_length: bool,
    pub go_backwards: bool,
    pub reverse: bool,
    pub strict: bool,
    pub keep_states: bool,
    /// Keep every step's result of each matrix product the step computes (a stepped run; for
    /// a gradient scan, whose recorded step then reads them instead of multiplying again).
    pub save_products: bool,
    pub mode: super::ScanMode,
    pub rewrites: Option<bool>,
    /// `keep` calls for outputs the body will reveal (no outputs declared).
    pub pending_keep: Vec<(usize, Keep)>,
    /// Messages say "carry entry" (JAX) rather than "output".
    pub carry_names: Option<Vec<String>>,
    /// PyTensor's `truncate_gradient`: gradients go back through the last this many steps only.
    pub truncate: Option<usize>,
}

impl Spec {
    pub fn new(label: &str) -> Spec {
        Spec {
            label: label.into(),
            seqs: Vec::new(),
            outs: Vec::new(),
            non_seqs: Vec::new(),
            n_steps: None,
            exact_length: false,
            go_backwards: false,
            reverse: false,
            strict: false,
            keep_states: false,
            save_products: false,
            mode: super::ScanMode::Auto,
            rewrites: None,
            pending_keep: Vec::new(),
            carry_names: None,
            truncate: None,
        }
    }
    /// Every declared input's variable: sequences, initial states, non-sequences.
    pub fn input_ids(&self) -> Vec<kiln_core::VarId> {
        let mut ids: Vec<kiln_core::VarId> = self.seqs.iter().map(|s| s.data.id()).collect();
        ids.extend(
            self.outs
                .iter()
                .filter_map(|o| o.init.as_ref().map(|i| i.id())),
        );
        ids.extend(self.non_seqs.iter().map(|n| n.id()));
        ids
    }
    /// Whether a declared input carries a gradient (the scan then runs differentiated).
    pub fn carries_grad(&self) -> bool {
        self.seqs.iter().any(|s| s.data.carries_grad())
            || self
                .outs
                .iter()
                .any(|o| o.init.as_ref().is_some_and(Erased::carries_grad))
            || self.non_seqs.iter().any(Erased::carries_grad)
    }
    /// What output `j` is called in messages.
    pub fn out_name(&self, j: usize) -> String {
        match &self.carry_names {
            Some(names) if j < names.len() => format!("carry entry `{}`", names[j]),
            Some(names) => format!("output {}", j - names.len()),
            None => format!("output {j}"),
        }
    }
}

/// The marker error of a traced body whose results carry gradients it captured: the scan then
/// runs differentiated, step by step.
pub(crate) const CAPTURED_GRADIENT: &str = "kiln: scan body captured a gradient";

/// The error for a body that captures a gradient under `strict`.
pub(crate) fn strict_captured_gradient(label: &str) -> Error {
    Error::Scan(format!(
        "scan {label}: the body captures a tensor that carries a gradient, which `strict` refuses; pass it as an input (a sequence, initial state or non-sequence; the JAX face: the carry or `xs`), or leave `strict` off"
    ))
}

/// One step's inputs: the step number, each sequence's rows (per tap), each recurrent output's
/// earlier rows (per tap), the non-sequences.
pub(crate) struct StepIn {
    pub t: Erased,
    pub seq_rows: Vec<Vec<Erased>>,
    pub out_rows: Vec<Vec<Erased>>,
    pub non_seqs: Vec<Erased>,
}

/// What a step returned: its outputs and the `until` condition, if any.
pub(crate) struct StepOut {
    pub outs: Vec<Erased>,
    pub until: Option<Erased>,
}

/// Taps must be distinct, and an output's negative.
pub(crate) fn check_taps(label: &str, what: &str, taps: &[i64], output: bool) -> Result<()> {
    if taps.is_empty() {
        return Err(Error::Scan(format!(
            "scan {label}: {what} has no taps; give at least one (e.g. &[-1])"
        )));
    }
    for (k, &t) in taps.iter().enumerate() {
        if taps[..k].contains(&t) {
            return Err(Error::Scan(format!(
                "scan {label}: {what} has taps {taps:?}; all the taps must be different"
            )));
        }
        if output && t >= 0 {
            return Err(Error::Scan(format!(
                "scan {label}: {what} has tap {t} in {taps:?}; an output's taps must be negative (-1 is the previous step)"
            )));
        }
        if t.unsigned_abs() > 1 << 40 {
            return Err(Error::Scan(format!(
                "scan {label}: {what} has tap {t}; taps are limited to ±2^40"
            )));
        }
    }
    Ok(())
}

/// Where sequence `taps` read at step 0: row `offset + tap`; and how many steps the sequence
/// supplies: its length minus the taps' span (counting the current row).
pub(crate) fn seq_span(taps: &[i64], len: usize) -> (i64, usize) {
    let lo = taps.iter().copied().min().unwrap_or(0).min(0);
    let hi = taps.iter().copied().max().unwrap_or(0).max(0);
    let span = (hi - lo) as u64;
    (-lo, (len as u64).saturating_sub(span) as usize)
}

/// The number of steps: `n_steps`, or the shortest sequence's supply; errors name the
/// sequence that disagrees.
pub(crate) fn step_count(spec: &Spec) -> Result<usize> {
    let label = &spec.label;
    for (i, s) in spec.seqs.iter().enumerate() {
        if s.data.shape.is_empty() {
            return Err(Error::Scan(format!(
                "scan {label}: sequence {i} is a scalar (shape []); a sequence needs a leading step axis — reshape it to [n, …] or pass it as a non-sequence"
            )));
        }
    }
    if spec.exact_length {
        // JAX: every leading size equals `length`
        let lens: Vec<usize> = spec.seqs.iter().map(|s| s.data.shape[0]).collect();
        if let Some(n) = spec.n_steps {
            if lens.iter().any(|&l| l != n) {
                return Err(Error::Scan(format!(
                    "scan {label} got `length` argument of {n} which disagrees with leading axis sizes {lens:?}; pass length={} or slice the inputs to {n} rows",
                    lens[0]
                )));
            }
            return Ok(n);
        }
        if let Some(&first) = lens.first() {
            if lens.iter().any(|&l| l != first) {
                return Err(Error::Scan(format!(
                    "scan {label}: the inputs have different leading axis sizes {lens:?}; scan needs one length — slice them to a common length"
                )));
            }
            return Ok(first);
        }
        return Err(Error::Scan(format!(
            "scan {label}: no inputs and no `length`; with no xs pass `.length(n)`"
        )));
    }
    let supplies: Vec<(usize, usize)> = spec
        .seqs
        .iter()
        .map(|s| (s.data.shape[0], seq_span(&s.taps, s.data.shape[0]).1))
        .collect();
    match spec.n_steps {
        Some(n) => {
            for (i, &(len, supply)) in supplies.iter().enumerate() {
                if supply < n {
                    let taps = &spec.seqs[i].taps;
                    let span = if taps == &[0] {
                        String::new()
                    } else {
                        format!(" ({supply} steps with taps {taps:?})")
                    };
                    return Err(Error::Scan(format!(
                        "scan {label}: sequence {i} has shape {:?}{span} but the scan's required number of steps is {n}; pass a sequence of at least {} rows or n_steps({supply})",
                        spec.seqs[i].data.shape,
                        n + (len - supply)
                    )));
                }
            }
            Ok(n)
        }
        None => supplies.iter().map(|&(_, s)| s).min().ok_or_else(|| {
            Error::Scan(format!(
                "scan {label}: no information about the number of steps; give `.n_steps(n)` or at least one sequence"
            ))
        }),
    }
}

/// How output `j` stores its rows given `n` steps (`None`: unknown, a while-scan).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Store {
    /// Nothing stored.
    Nothing,
    /// Steps `a..b` at rows `0..b-a`.
    Range(usize, usize),
    /// The last `k` steps, in a circular buffer of `k` rows (`until` scans).
    Ring(usize),
}

impl Store {
    pub fn rows(&self) -> usize {
        match *self {
            Store::Nothing => 0,
            Store::Range(a, b) => b - a,
            Store::Ring(k) => k,
        }
    }
}

/// The save-mem plan: the steps to run and each output's store. `until`: the step count is only
/// an upper bound.
pub(crate) fn plan_storage(
    keeps: &[Keep],
    n: usize,
    until: bool,
    finals_used: bool,
) -> (usize, Vec<Store>) {
    let mut stores = Vec::new();
    // the final carry is the state after the last step
    let mut needed = if finals_used { n } else { 0 };
    for k in keeps {
        let (store, need) = match *k {
            Keep::All => (Store::Range(0, n), n),
            Keep::Nothing => (Store::Nothing, 0),
            Keep::Last(k) if until => (Store::Ring(k.min(n)), n),
            Keep::Last(k) => (Store::Range(n - k.min(n), n), n),
            Keep::Rows(ref r) => {
                let b = r.end.min(n);
                let a = r.start.min(b);
                (Store::Range(a, b), b)
            }
            Keep::Row(i) if i >= 0 => {
                let i = (i as usize).min(n);
                (Store::Range(i, (i + 1).min(n)), (i + 1).min(n))
            }
            Keep::Row(i) if until => (Store::Ring(i.unsigned_abs().min(n)), n),
            Keep::Row(i) => {
                let back = i.unsigned_abs();
                if back > n {
                    (Store::Range(0, 0), 0)
                } else {
                    (Store::Range(n - back, n - back + 1), n - back + 1)
                }
            }
        };
        needed = needed.max(need);
        stores.push(store);
    }
    (needed, stores)
}
