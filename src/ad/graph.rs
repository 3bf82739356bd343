//! The AD graph: one node per array that can carry a gradient, edges to the nodes it was
//! computed from, and the rule that maps a cotangent (or tangents) across the node.
//!
//! It is a layer above the registry: a node never holds a kernel or a buffer of its own, only
//! ordinary lazy arrays (captured operands inside its rule, an accumulated gradient), so a backward
//! pass is traced and fused like any kiln code. Nodes are reference counted by the handles that
//! carry their index (`Array`'s `ad` field) and by their children's edges, so a node lives exactly
//! as long as something can still ask for a gradient through it. The graph is shared by all
//! threads behind one lock (an array with a gradient may be sent across threads); the lock is never
//! held while a rule runs, because rules trace array code that may record nodes of its own.

use super::value::Grad;
use kiln_core::{VarId, VarType};
use parking_lot::Mutex;
use std::sync::Arc;

/// A node's index; 0 means "no node" (an array that carries no gradient).
pub(crate) type AdIndex = u32;

/// How a node maps derivatives across itself.
pub(crate) trait Rule: Send + Sync {
    /// A short name for `whos()` and error messages (`mul`, `exp`, `gather`, …).
    fn name(&self) -> &'static str;
    /// The contributions to each input (in the order of the node's parents) of the cotangent
    /// `ct` of the output; `None` for an input that gets nothing.
    fn backward(&self, ct: &Grad) -> Vec<Option<Grad>>;
    /// The tangent of the output given the inputs' tangents (`None`: zero).
    fn forward(&self, tangents: &[Option<Grad>]) -> Option<Grad>;
    /// Why reverse mode cannot cross this node, if it cannot (a loop, a scan, a stencil).
    fn refuses_reverse(&self) -> Option<(String, String)> {
        None
    }
    /// [`Rule::forward`], or an error when forward mode cannot cross this node (a custom op
    /// without `forward`).
    fn try_forward(&self, tangents: &[Option<Grad>]) -> kiln_core::Result<Option<Grad>> {
        Ok(self.forward(tangents))
    }
    /// Whether output lane `i` depends only on lane `i` of each input (or on a size-1 input):
    /// what AD through a loop body or branch needs of the ops inside it.
    fn lane_local(&self) -> bool {
        false
    }
}

/// A node's list of neighbours: up to three inline (every elementwise op), more on the heap, so
/// that recording an op allocates no edge list (tracing with gradients stays cheap).
#[derive(Clone)]
pub(crate) enum Edges {
    Inline(u8, [AdIndex; 3]),
    Heap(Vec<AdIndex>),
}

impl Default for Edges {
    fn default() -> Self {
        Edges::Inline(0, [0; 3])
    }
}

impl Edges {
    pub fn from_slice(s: &[AdIndex]) -> Edges {
        if s.len() <= 3 {
            let mut a = [0; 3];
            a[..s.len()].copy_from_slice(s);
            Edges::Inline(s.len() as u8, a)
        } else {
            Edges::Heap(s.to_vec())
        }
    }
    pub fn push(&mut self, x: AdIndex) {
        match self {
            Edges::Inline(n, a) if (*n as usize) < 3 => {
                a[*n as usize] = x;
                *n += 1;
            }
            Edges::Inline(_, a) => {
                let mut v = Vec::with_capacity(8);
                v.extend_from_slice(a);
                v.push(x);
                *self = Edges::Heap(v);
            }
            Edges::Heap(v) => v.push(x),
        }
    }
    /// Remove one occurrence of `x`, searching from the newest (children are usually released
    /// newest first, so a long-lived parameter with many children finds them at once).
    pub fn remove_one(&mut self, x: AdIndex) {
        match self {
            Edges::Inline(n, a) => {
                if let Some(k) = a[..*n as usize].iter().rposition(|&c| c == x) {
                    a.copy_within(k + 1..*n as usize, k);
                    *n -= 1;
                }
            }
            Edges::Heap(v) => {
                if let Some(k) = v.iter().rposition(|&c| c == x) {
                    v.remove(k);
                }
            }
        }
    }
}

impl std::ops::Deref for Edges {
    type Target = [AdIndex];
    fn deref(&self) -> &[AdIndex] {
        match self {
            Edges::Inline(n, a) => &a[..*n as usize],
            Edges::Heap(v) => v,
        }
    }
}

pub(crate) struct Node {
    /// Handles and child edges that refer to the node.
    refs: u32,
    /// Of those, the array handles (for `whos()`: while one lives, so does `var`).
    handles: u32,
    /// The engine variable the node was made for (0: not recorded), shown by `whos()`.
    pub var: u32,
    pub ty: VarType,
    pub size: usize,
    /// Inputs that carry gradients (each holds one reference).
    pub parents: Edges,
    /// Nodes computed from this one (not counted: a child holds its parent, not the reverse).
    pub children: Edges,
    /// `None` for a leaf (`enable_grad`), or once a backward pass consumed the node.
    pub rule: Option<Arc<dyn Rule>>,
    /// The gradient (reverse mode) or tangent (forward mode) accumulated here.
    pub grad: Option<Grad>,
    /// Whether backward passes store this node's gradient (leaves, and nodes the user called
    /// `enable_grad` on).
    pub keeps_grad: bool,
    /// A backward pass crossed the node and dropped its edges.
    pub consumed: bool,
    /// Creation order (isolate scopes stop at nodes older than their start).
    pub seq: u64,
}

#[derive(Default)]
pub(crate) struct Graph {
    nodes: Vec<Option<Node>>,
    free: Vec<AdIndex>,
    seq: u64,
    alive: u64,
    edges: u64,
}

static GRAPH: Mutex<Graph> = Mutex::new(Graph {
    nodes: Vec::new(),
    free: Vec::new(),
    seq: 0,
    alive: 0,
    edges: 0,
});

/// What the graph holds now (for `kiln::stats()`).
pub(crate) fn counters() -> (u64, u64, u64) {
    let g = GRAPH.lock();
    let bytes = g
        .nodes
        .iter()
        .flatten()
        .filter_map(|n| n.grad.as_ref())
        .map(|gr| (kiln_core::size(gr.id()) * gr.ty().size_bytes()) as u64)
        .sum();
    (g.alive, g.edges, bytes)
}

/// Whether any node is alive (cheap: no walk over the nodes).
pub(crate) fn any_alive() -> bool {
    GRAPH.lock().alive > 0
}

/// Run `f` on the graph under its lock. Whatever `f` returns is dropped after the lock is
/// released (it may hold arrays whose drop touches the graph).
pub(crate) fn with<R>(f: impl FnOnce(&mut Graph) -> R) -> R {
    f(&mut GRAPH.lock())
}

/// A new node with the given parents (one reference taken on each) and rule.
pub(crate) fn new_node(
    ty: VarType,
    size: usize,
    parents: Vec<AdIndex>,
    rule: Option<Arc<dyn Rule>>,
) -> AdIndex {
    with(|g| g.insert(ty, size, &parents, rule))
}

/// [`new_node`] with the parents as a slice (nothing allocated for up to three of them), for
/// the array `var` (shown by `whos()`).
pub(crate) fn new_node_with(
    ty: VarType,
    size: usize,
    parents: &[AdIndex],
    rule: Option<Arc<dyn Rule>>,
    var: VarId,
) -> AdIndex {
    with(|g| {
        let ad = g.insert(ty, size, parents, rule);
        g.node_mut(ad).var = var.0;
        ad
    })
}

/// One more handle (an array or gradient) on node `ad`.
pub(crate) fn inc_ref(ad: AdIndex) {
    if ad != 0 {
        with(|g| {
            let n = g.node_mut(ad);
            n.refs += 1;
            n.handles += 1;
        });
    }
}

/// A handle on node `ad` is gone.
pub(crate) fn dec_ref(ad: AdIndex) {
    unref(ad, true);
}

/// A reference a pass took with [`Graph::retain`] is given back.
pub(crate) fn release_retained(ad: AdIndex) {
    unref(ad, false);
}

fn unref(ad: AdIndex, handle: bool) {
    if ad == 0 {
        return;
    }
    // rules and gradients of freed nodes hold arrays: drop them once the lock is released
    let garbage = with(|g| {
        // the common case (another handle or a child still refers to it) allocates nothing
        let n = g.node_mut(ad);
        if handle {
            n.handles = n.handles.saturating_sub(1);
        }
        if n.refs > 1 {
            n.refs -= 1;
            return None;
        }
        Some(g.release(ad))
    });
    drop(garbage);
}

/// The variables that array handles carrying a node refer to, each with what the node is: `leaf`
/// (`enable_grad`), or the name of the op that computed it (`+ grad` where backward passes keep
/// its gradient; `used` once a backward pass consumed it). For `whos()`.
pub(crate) fn var_kinds() -> Vec<(u32, String)> {
    let g = GRAPH.lock();
    g.nodes
        .iter()
        .flatten()
        .filter(|n| n.var != 0 && n.handles > 0)
        .map(|n| {
            let what = match (&n.rule, n.consumed) {
                (_, true) => "used".to_string(),
                (None, false) => "leaf".to_string(),
                (Some(r), false) if n.keeps_grad => format!("{} + grad", r.name()),
                (Some(r), false) => r.name().to_string(),
            };
            (n.var, what)
        })
        .collect()
}

/// Nodes' rules and gradients freed by a release, dropped outside the lock.
pub(crate) type Garbage = Vec<(Option<Arc<dyn Rule>>, Option<Grad>)>;

impl Graph {
    fn insert(
        &mut self,
        ty: VarType,
        size: usize,
        parents: &[AdIndex],
        rule: Option<Arc<dyn Rule>>,
    ) -> AdIndex {
        self.seq += 1;
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                if self.nodes.is_empty() {
                    self.nodes.push(None); // index 0 is "no node"
                }
                self.nodes.push(None);
                (self.nodes.len() - 1) as AdIndex
            }
        };
        for &p in parents {
            let pn = self.node_mut(p);
            pn.refs += 1;
            pn.children.push(idx);
        }
        self.edges += parents.len() as u64;
        self.alive += 1;
        self.nodes[idx as usize] = Some(Node {
            refs: 1,
            handles: 1,
            var: 0,
            ty,
            size,
            parents: Edges::from_slice(parents),
            children: Edges::default(),
            rule,
            grad: None,
            keeps_grad: false,
            consumed: false,
            seq: self.seq,
        });
        idx
    }

    pub fn node(&self, ad: AdIndex) -> &Node {
        self.nodes[ad as usize]
            .as_ref()
            .unwrap_or_else(|| panic!("kiln: AD node {ad} used after it was freed"))
    }

    pub fn node_mut(&mut self, ad: AdIndex) -> &mut Node {
        self.nodes[ad as usize]
            .as_mut()
            .unwrap_or_else(|| panic!("kiln: AD node {ad} used after it was freed"))
    }

    /// The engine variable node `ad` was made for, while an array handle to it lives (so the
    /// variable is that array, not a later one with its id).
    pub fn live_var(&self, ad: AdIndex) -> Option<u32> {
        let n = self.node(ad);
        (n.handles > 0 && n.var != 0).then_some(n.var)
    }

    /// Whether an array handle (not only a child's edge or a pass) refers to node `ad`: only
    /// then can anyone read or set its gradient.
    pub fn has_handles(&self, ad: AdIndex) -> bool {
        self.node(ad).handles > 0
    }

    /// The sequence number the next node will get.
    pub fn next_seq(&self) -> u64 {
        self.seq + 1
    }

    /// Drop one reference; free the node (and, iteratively, parents left without references).
    pub fn release(&mut self, ad: AdIndex) -> Garbage {
        let mut garbage = Vec::new();
        let mut stack = vec![ad];
        while let Some(i) = stack.pop() {
            let n = self.node_mut(i);
            n.refs -= 1;
            if n.refs > 0 {
                continue;
            }
            let n = self.nodes[i as usize].take().expect("live node");
            self.alive -= 1;
            self.free.push(i);
            self.edges -= n.parents.len() as u64;
            for &p in n.parents.iter() {
                self.node_mut(p).children.remove_one(i);
                stack.push(p);
            }
            garbage.push((n.rule, n.grad));
        }
        garbage
    }

    /// Cut a node's edges after a backward pass crossed it (its rule and captured arrays go).
    pub fn consume(&mut self, ad: AdIndex) -> Garbage {
        let n = self.node_mut(ad);
        if n.rule.is_none() {
            return Vec::new();
        }
        let rule = n.rule.take();
        n.consumed = true;
        let parents = std::mem::take(&mut n.parents);
        self.edges -= parents.len() as u64;
        let mut garbage = vec![(rule, None)];
        for &p in parents.iter() {
            self.node_mut(p).children.remove_one(ad);
            garbage.extend(self.release(p));
        }
        garbage
    }

    /// Take one more reference on a live node.
    pub fn retain(&mut self, ad: AdIndex) {
        self.node_mut(ad).refs += 1;
    }
}
