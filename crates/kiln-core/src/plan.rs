//! The plan of one evaluation: a plain value that says what will run, decided before anything does.
//!
//! [`plan`] turns an evaluation's roots and pending side effects into kernels (one per size group,
//! built by `build`), with what each parameter is bound to, where each output goes (a new buffer,
//! an operand's buffer taken over in place, or an assignment's target) and the operands the
//! in-place policy turned down, and why. It reads the registry and decides; it allocates nothing,
//! launches nothing and counts nothing. The evaluation driver above it runs a plan, and hands one
//! to a user who asks (`plan_for`), whose `Display` shows the fusion and in-place
//! decisions as text that tests snapshot (as tinygrad's schedule is a list of items a runner
//! executes).

use crate::build::{build, build_split, group, Binding, Built, Group};
use crate::inplace::{self, Declined};
use crate::kernel::{Kernel, ParamKind};
use crate::registry::{Buffer, State};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// What an evaluation is asked to do beyond computing its roots.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Intent {
    /// Run the kernel computing this variable in 2-d tiles of rows of this many lanes.
    pub(crate) tile: Option<(u32, usize)>,
    /// Store the (single) root into this evaluated variable's buffer when that is safe.
    pub(crate) into: Option<u32>,
}

/// Where one output of a planned kernel goes.
pub(crate) enum Dest {
    /// A new buffer, allocated when the plan runs.
    Fresh,
    /// The buffer of an operand that nothing can read after this evaluation (update-in-place).
    Reuse { from: u32, buf: Arc<Buffer> },
    /// The buffer of the assignment's target (`x.assign(expr)`).
    Target { var: u32, buf: Arc<Buffer> },
}

/// One kernel of a plan with the destination of each of its outputs (root order).
pub(crate) struct Step {
    pub(crate) built: Built,
    /// Per root (`built.roots` order); shorter, usually empty, when the rest are [`Dest::Fresh`]
    /// (no allocation for the common case).
    pub(crate) dests: Vec<Dest>,
    /// Operands the in-place policy turned down, and why (counted and logged when the plan runs).
    pub(crate) declined: Vec<(u32, Declined)>,
}

/// An evaluation's kernels in launch order, their parameters' bindings, and where each result
/// goes. It holds the buffers it binds (which is why a user gets a [`Summary`], not the plan: a
/// held buffer is one that no evaluation may take over).
pub(crate) struct Plan {
    pub(crate) steps: Vec<Step>,
    pub(crate) roots: Vec<u32>,
    pub(crate) side: Vec<u32>,
    /// Each variable's name for printing (`'label' f32[n]`); filled for plans a user asked for.
    names: HashMap<u32, String>,
}

impl Plan {
    /// What a user sees of the plan: its kernels and its text (no buffer is held).
    pub(crate) fn summary(mut self, st: &State) -> Summary {
        self.name_vars(st);
        let text = self.to_string();
        Summary {
            kernels: self.steps.into_iter().map(|s| s.built.kernel).collect(),
            text,
        }
    }

    /// The one kernel of a fused plan ([`plan_fused`]).
    pub(crate) fn into_built(mut self) -> Built {
        self.steps.pop().expect("one kernel").built
    }

    /// Whether the assignment target takes the result ([`Intent::into`]).
    pub(crate) fn assigns(&self) -> bool {
        self.steps
            .iter()
            .any(|s| s.dests.iter().any(|d| matches!(d, Dest::Target { .. })))
    }

    /// Name every variable the plan mentions, for printing.
    fn name_vars(&mut self, st: &State) {
        let mut ids: Vec<u32> = Vec::new();
        for s in &self.steps {
            ids.extend(&s.built.param_vars);
            ids.extend(s.declined.iter().map(|d| d.0));
            for d in &s.dests {
                match d {
                    Dest::Fresh => {}
                    Dest::Reuse { from: v, .. } | Dest::Target { var: v, .. } => ids.push(*v),
                }
            }
        }
        for id in ids {
            self.names.entry(id).or_insert_with(|| {
                let v = st.var(id);
                match &v.label {
                    Some(l) => format!("'{l}' {}[{}]", v.ty, v.size),
                    None => format!("{}[{}]", v.ty, v.size),
                }
            });
        }
    }

    fn name(&self, id: u32) -> String {
        self.names
            .get(&id)
            .cloned()
            .unwrap_or_else(|| format!("r{id}"))
    }
}

/// What an evaluation would run, as a user sees it: its kernels in launch order and the plan's
/// text, which shows the decisions (which roots fuse into which kernel,
/// which operands' buffers take which results, what was turned down and why); variables appear by
/// label, type and length, parameters by index.
///
/// ```
/// use kiln_core::{self as core, Op, VarType};
/// let x = core::from_scalars(&[1.0f32, 2.0, 3.0]).unwrap();
/// let two = core::literal(VarType::F32, 2.0f32.to_bits() as u64, 1);
/// let y = core::op(Op::Mul, &[x, two]).unwrap();
/// let plan = core::schedule::plan_for(&[y]);
/// assert_eq!(plan.kernels().len(), 1);
/// // `x` has a handle, so its buffer cannot take the result
/// assert!(plan.to_string().contains("p0 input     f32[3]"), "{plan}");
/// assert!(plan.to_string().contains("output    f32[3]: new buffer"), "{plan}");
/// for v in [x, two, y] {
///     core::dec_ref(v);
/// }
/// ```
pub struct Summary {
    kernels: Vec<Kernel>,
    text: String,
}

impl Summary {
    /// The kernels, in launch order (a stencil's interior variant is not listed: it is the same
    /// work with plain loads).
    pub fn kernels(&self) -> &[Kernel] {
        &self.kernels
    }

    /// The kernels, owned.
    pub fn into_kernels(self) -> Vec<Kernel> {
        self.kernels
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Plan an evaluation of `roots` (unevaluated, held by the caller) and the side effects `side`.
pub(crate) fn plan(st: &State, roots: Vec<u32>, side: Vec<u32>, intent: Intent) -> Plan {
    let mut steps: Vec<Step> = group(st, &roots, &side)
        .into_iter()
        .map(|g| Step {
            built: build_split(st, g),
            dests: Vec::new(),
            declined: Vec::new(),
        })
        .collect();
    for s in steps.iter_mut() {
        let b = &mut s.built;
        if intent.tile.is_some_and(|(tid, _)| b.roots.contains(&tid)) {
            b.tile_cols = intent.tile.map_or(0, |t| t.1);
        }
        // scatters into few bins update per-block copies with plain read-modify-writes: only for
        // kernels launched whole (`launch_kernel`, which then guarantees one thread per copy)
        if b.interior.is_none() && b.tile_cols == 0 {
            let vars = &b.param_vars;
            crate::privatise::mark_exclusive(&mut b.kernel, |p| st.var(vars[p]).size);
        }
    }
    let reusable: Vec<bool> = steps
        .iter()
        .map(|s| inplace::may_reuse(st, &s.built))
        .collect();
    let left = (inplace::enabled() && (intent.into.is_some() || reusable.iter().any(|&r| r)))
        .then(|| inplace::released_inputs(st, &roots, &side));
    // the assignment target's kernel and its buffer, when it can take the result
    let target = match (intent.into, &left) {
        (Some(t), Some(left)) => roots.first().and_then(|&root| {
            let all: Vec<&Built> = steps.iter().map(|s| &s.built).collect();
            let bi = all.iter().position(|b| b.roots.contains(&root))?;
            inplace::assign_target(st, &all, bi, root, t, left).map(|buf| (bi, root, t, buf))
        }),
        _ => None,
    };
    for (bi, s) in steps.iter_mut().enumerate() {
        let mine = target.as_ref().filter(|t| t.0 == bi);
        if let (Some(left), true) = (&left, reusable[bi]) {
            let d = inplace::decide(st, &s.built, left, mine.map(|t| t.1));
            s.declined = d.declined;
            if d.reuse.iter().any(Option::is_some) {
                s.dests = d
                    .reuse
                    .into_iter()
                    .map(|r| match r {
                        Some((from, buf)) => Dest::Reuse { from, buf },
                        None => Dest::Fresh,
                    })
                    .collect();
            }
        }
        if let Some((_, root, var, buf)) = mine {
            let n = s.built.roots.len();
            s.dests.resize_with(n, || Dest::Fresh);
            let k = s
                .built
                .roots
                .iter()
                .position(|r| r == root)
                .expect("the root");
            s.dests[k] = Dest::Target {
                var: *var,
                buf: buf.clone(),
            };
        }
    }
    Plan {
        steps,
        roots,
        side,
        names: HashMap::new(),
    }
}

/// Plan a fused reduction's kernel over `g` (its roots of one size): the roots are consumed as
/// they are produced, so the one step has no destinations; the kernel is launched whole (no
/// stencil split, no privatised scatters) and takes no operand's buffer.
pub(crate) fn plan_fused(st: &State, g: Group) -> Plan {
    let roots = g.roots.clone();
    let built = build(st, g);
    Plan {
        steps: vec![Step {
            built,
            dests: Vec::new(),
            declined: Vec::new(),
        }],
        roots,
        side: Vec::new(),
        names: HashMap::new(),
    }
}

/// Count and log one step's in-place decisions, as the plan runs it (a plan only looked at counts
/// nothing; a step never reached, after an allocation failed, counts nothing either).
pub(crate) fn note_decisions(st: &State, s: &Step) {
    for &(id, why) in &s.declined {
        inplace::note_declined(&|| st.label_of(id), why);
    }
    for (d, &root) in s.dests.iter().zip(&s.built.roots) {
        match d {
            Dest::Fresh => {}
            Dest::Reuse { from, .. } => {
                let bytes = (s.built.size * st.var(root).ty.size_bytes()) as u64;
                inplace::note_reuse(&|| st.label_of(*from), &|| st.label_of(root), bytes);
            }
            Dest::Target { var, buf } => inplace::note_reuse(
                &|| st.label_of(*var),
                &|| format!("the assigned value {}", st.label_of(root)),
                buf.bytes() as u64,
            ),
        }
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.steps.is_empty() {
            return writeln!(f, "nothing to run");
        }
        let n = self.steps.len();
        for (i, s) in self.steps.iter().enumerate() {
            self.fmt_step(f, i, n, s)?;
        }
        Ok(())
    }
}

impl Plan {
    fn fmt_step(&self, f: &mut fmt::Formatter<'_>, i: usize, n: usize, s: &Step) -> fmt::Result {
        let b = &s.built;
        write!(
            f,
            "kernel {} of {n}: {} lanes, {} instructions",
            i + 1,
            b.size,
            b.kernel.len()
        )?;
        if !b.computed.is_empty() {
            let n = b.computed.len();
            let s = if n == 1 { "" } else { "s" };
            write!(f, ", {n} value{s} computed in registers")?;
        }
        writeln!(f)?;
        let params = &b.kernel.params;
        for (p, param) in params.iter().enumerate() {
            let var = b.param_vars[p];
            let kind = match param.kind {
                ParamKind::Input => "input",
                ParamKind::Broadcast => "broadcast",
                ParamKind::Indexed => "indexed",
                ParamKind::Output => "output",
            };
            write!(f, "  p{p} {kind:<9} {}", self.name(var))?;
            if let Binding::Shifted(_, off) = b.bindings[p] {
                write!(f, " shifted by {off}")?;
            }
            if b.modified.contains(&(p as u32)) {
                write!(f, " (written by a scatter)")?;
            }
            if param.kind == ParamKind::Output {
                let k = b.roots.iter().position(|&r| r == var).expect("a root");
                match s.dests.get(k).unwrap_or(&Dest::Fresh) {
                    Dest::Fresh => write!(f, ": new buffer")?,
                    Dest::Reuse { from, .. } => {
                        let q = (0..params.len()).find(|&q| {
                            params[q].kind != ParamKind::Output && b.param_vars[q] == *from
                        });
                        match q {
                            Some(q) => write!(f, ": in place of p{q}")?,
                            None => write!(f, ": in place of {}", self.name(*from))?,
                        }
                    }
                    Dest::Target { var, .. } => {
                        write!(f, ": into the assigned {}", self.name(*var))?
                    }
                }
            }
            writeln!(f)?;
        }
        for &(id, why) in &s.declined {
            writeln!(f, "  not in place: {}: {}", self.name(id), why.says())?;
        }
        if b.tile_cols > 0 {
            writeln!(f, "  runs in 2-d tiles of rows of {} lanes", b.tile_cols)?;
        }
        if let Some(inner) = &b.interior {
            let p = &inner.plan;
            writeln!(
                f,
                "  stencil: interior {:?}..{:?} of {:?} ({} lanes) runs plain loads, the border this kernel",
                p.start,
                p.end,
                p.shape,
                p.interior_lanes()
            )?;
        }
        Ok(())
    }
}
