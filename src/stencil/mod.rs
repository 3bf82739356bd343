//! Stencils: the computation for one output element, written with reads at offsets relative to it.
//!
//! `kiln::stencil(f)` holds a closure that takes [`Rel`] handles (one per relatively indexed input)
//! and returns the value of one output element. Applying it traces the closure once over whole
//! arrays: every `a.at([di, dj])` becomes a lazy *tap* — the input at the lane's neighbour — so the
//! result is an ordinary lazy array that fuses with the work around it. The offsets read give the
//! neighbourhood (or `.neighborhood(..)` declares it); the border follows the [`Boundary`] mode.
//!
//! Each tap carries two meanings (see `kiln_core::stencil`): a general one (coordinates, boundary
//! rule, gather) that is right at every lane, and a fast one — a plain load at a constant distance
//! from the lane — that the scheduler uses for the interior, where no read can leave the array.
//! The border lanes run the general kernel. Shapes are kernel parameters, so the same stencil on
//! another grid size reuses its compiled kernels.

mod grad;

use crate::array::{ok, Array, Bool, Float64, Int64};
use crate::ops::select;
use crate::tensor::Tensor;
use crate::types::Numeric;
use kiln_core::stencil::StencilMeta;
use kiln_core::{Error, Op, Result, Scalar};
use parking_lot::Mutex;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

/// What a stencil computes at the border, where some offset reads fall outside the input.
///
/// `Skip` is Numba's rule: border elements are not computed; they get `cval` (default 0), or keep
/// the output's values with [`Stencil::apply_into`] and no `cval`. The padding modes compute every
/// element and follow scipy.ndimage for reads outside the input (for an input `a b c d`):
///
/// | mode | reads before `a` … after `d` |
/// |---|---|
/// | `Constant(v)` | `v v v v \| a b c d \| v v v v` |
/// | `Wrap` | `a b c d \| a b c d \| a b c d` |
/// | `Reflect` | `d c b a \| a b c d \| d c b a` |
/// | `Mirror` | `d c b \| a b c d \| c b a` |
/// | `Nearest` | `a a a a \| a b c d \| d d d d` |
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Boundary {
    #[default]
    Skip,
    Constant(f64),
    Wrap,
    Reflect,
    Mirror,
    Nearest,
}

/// The largest offset (and neighbourhood bound) a stencil accepts, in elements.
pub const MAX_OFFSET: i64 = 1 << 40;

/// A neighbourhood: one inclusive `(lo, hi)` offset range per dimension.
pub type Neighborhood = Vec<(i64, i64)>;

/// A stencil kernel and its options; see [`stencil`].
pub struct Stencil<F> {
    f: F,
    neighborhood: Option<Vec<(i64, i64)>>,
    cval: Option<f64>,
    boundary: Boundary,
    fuse: bool,
    /// The neighbourhood found by the last application (shared by clones).
    inferred: Arc<Mutex<Option<Neighborhood>>>,
    /// The constant partial derivatives of the last differentiated application, under the
    /// structure of its traced value (shared by clones; see `grad::record`).
    partials: Arc<Mutex<Option<grad::CachedPartials>>>,
}

impl<F: Clone> Clone for Stencil<F> {
    fn clone(&self) -> Self {
        Stencil {
            f: self.f.clone(),
            neighborhood: self.neighborhood.clone(),
            cval: self.cval,
            boundary: self.boundary,
            fuse: self.fuse,
            inferred: self.inferred.clone(),
            partials: self.partials.clone(),
        }
    }
}

/// A stencil from the computation of one output element (Numba's `@stencil`).
///
/// `f` takes a [`Rel`] (or a tuple of them, for several relatively indexed inputs) and returns the
/// element; `a.at([di, dj])` reads the input at that offset from the element. Weights and other
/// absolutely indexed inputs are captured tensors read with [`Tensor::get`]; scalars are captured
/// values. The output has the first input's shape and the kernel's element type.
///
/// ```
/// use kiln::prelude::*;
/// let grid = Tensor::<f32>::from_vec((0..20).map(|v| (v * v) as f32).collect(), &[4, 5]);
/// let lap = kiln::stencil(|a: &Rel<f32>| {
///     a.at([0, 1]) + a.at([0, -1]) + a.at([1, 0]) + a.at([-1, 0]) - 4.0 * a.at([0, 0])
/// });
/// let out = lap.apply(&grid)?;                          // border = 0, like Numba
/// assert_eq!(out.shape(), &[4, 5]);
/// assert_eq!(out.to_vec()[6], 52.0);                   // 25 + 49 + 1 + 121 − 4·36
/// assert_eq!(lap.inferred_neighborhood(), Some(vec![(-1, 1), (-1, 1)]));
/// let wrapped = lap.clone().boundary(Boundary::Wrap).apply(&grid)?;
/// assert_eq!(wrapped.to_vec()[0], 1.0 + 16.0 + 25.0 + 225.0);
/// # Ok::<(), kiln::Error>(())
/// ```
pub fn stencil<F>(f: F) -> Stencil<F> {
    Stencil {
        f,
        neighborhood: None,
        cval: None,
        boundary: Boundary::Skip,
        fuse: true,
        inferred: Arc::new(Mutex::new(None)),
        partials: Arc::new(Mutex::new(None)),
    }
}

/// A relatively indexed stencil input, as the kernel closure sees it.
pub struct Rel<T: Scalar> {
    ctx: Rc<Ctx>,
    src: Array<T>,
    shape: Vec<usize>,
    name: String,
    /// Reads through a shifted pointer in the interior (same shape as the domain, and a source
    /// that is evaluated or cheap to recompute).
    fast: bool,
    dims: Vec<Int64>,
    strides: Vec<Int64>,
    /// Position among the stencil's inputs (taps and AD leaves are told apart by it).
    input: usize,
}

/// What one application shares between its inputs: the domain, lane coordinates, the offsets read
/// and the errors found while tracing (reported by `apply`).
#[doc(hidden)]
pub struct Ctx {
    domain: Vec<usize>,
    n: usize,
    boundary: Boundary,
    declared: Option<Vec<(i64, i64)>>,
    /// Each lane's coordinate per dimension of the domain.
    coords: Vec<Int64>,
    /// Every constant-offset read: (input, offset as written).
    taps: RefCell<Vec<(usize, Vec<i64>)>>,
    errors: RefCell<Vec<String>>,
    /// Lanes whose value-dependent offsets were clamped into the neighbourhood (`at_var`).
    clamped: RefCell<Vec<Bool>>,
    params: Params,
    /// Whether every read becomes an AD leaf (partials are being traced), and the leaves made.
    seed: bool,
    /// Whether reads are gathers with their derivatives recorded (inside a transformation whose
    /// derivatives are differentiated again: the application is straight-line code there).
    recorded: bool,
    leaves: RefCell<Vec<grad::Leaf>>,
}

/// Sizes and strides as evaluated size-1 `Int64`s, one per distinct value: shapes are data of the
/// kernels, not code, so another grid size reuses the compiled kernels.
#[derive(Default, Clone)]
struct Params(RefCell<Vec<(usize, Int64)>>);

impl Params {
    fn get(&self, v: usize) -> Int64 {
        let mut p = self.0.borrow_mut();
        if let Some((_, a)) = p.iter().find(|(k, _)| *k == v) {
            return a.clone();
        }
        let a = Int64::from_slice(&[v as i64]);
        p.push((v, a.clone()));
        a
    }
}

impl Ctx {
    /// A context over `domain` whose lanes have coordinates `coords` (`n` lanes).
    fn new(
        domain: &[usize],
        coords: Vec<Int64>,
        n: usize,
        boundary: Boundary,
        declared: Option<Neighborhood>,
        params: Params,
    ) -> Ctx {
        Ctx {
            domain: domain.to_vec(),
            n,
            boundary,
            declared,
            coords,
            taps: RefCell::new(Vec::new()),
            errors: RefCell::new(Vec::new()),
            clamped: RefCell::new(Vec::new()),
            params,
            seed: false,
            recorded: false,
            leaves: RefCell::new(Vec::new()),
        }
    }

    fn error(&self, message: String) {
        let mut e = self.errors.borrow_mut();
        if !e.contains(&message) {
            e.push(message);
        }
    }
}

impl<T: Scalar> Clone for Rel<T> {
    /// Another handle on the same input of the same application (a binding hands one to a
    /// kernel written in another language).
    fn clone(&self) -> Self {
        Rel {
            ctx: self.ctx.clone(),
            src: self.src.clone(),
            shape: self.shape.clone(),
            name: self.name.clone(),
            fast: self.fast,
            dims: self.dims.clone(),
            strides: self.strides.clone(),
            input: self.input,
        }
    }
}

impl<T: Scalar> Rel<T> {
    fn new(ctx: &Rc<Ctx>, t: &Tensor<T>, name: String, fast_ok: bool, input: usize) -> Rel<T> {
        let shape = t.shape().to_vec();
        let mut strides = vec![1usize; shape.len()];
        for d in (0..shape.len().saturating_sub(1)).rev() {
            strides[d] = strides[d + 1] * shape[d + 1];
        }
        Rel {
            ctx: ctx.clone(),
            src: t.array().clone(),
            fast: fast_ok && shape == ctx.domain,
            dims: shape.iter().map(|&d| ctx.params.get(d)).collect(),
            strides: strides.iter().map(|&s| ctx.params.get(s)).collect(),
            shape,
            name,
            input,
        }
    }

    /// The input at `offsets` from the element being computed (one constant per dimension).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let x = Tensor::<f64>::arange(6);
    /// let diff = kiln::stencil(|a: &Rel<f64>| a.at([1]) - a.at([0])).apply(&x)?;
    /// assert_eq!(diff.to_vec(), vec![1.0, 1.0, 1.0, 1.0, 1.0, 0.0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn at<const N: usize>(&self, offsets: [i64; N]) -> Array<T> {
        self.tap(&offsets)
    }

    /// As [`Rel::at`] with the offsets in a slice, for callers that know the rank only at run
    /// time (a binding to another language). The wrong number of offsets is reported by `apply`.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let x = Tensor::<f64>::arange(4);
    /// let d = kiln::stencil(|a: &Rel<f64>| a.at_offsets(&[1]) - a.at_offsets(&[0])).apply(&x)?;
    /// assert_eq!(d.to_vec(), vec![1.0, 1.0, 1.0, 0.0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn at_offsets(&self, offsets: &[i64]) -> Array<T> {
        self.tap(offsets)
    }

    /// The elements of a window around the element, `ranges[d] = (lo, hi)` inclusive per
    /// dimension, in row-major order (Numba's slice windows, e.g. `a[-1:2, -1:2]`); reduce them
    /// with min/max, sums, or [`median`].
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let x = Tensor::<i32>::from_vec(vec![5, 1, 4, 2, 3], &[5]);
    /// let mx = kiln::stencil(|a: &Rel<i32>| {
    ///     a.window(&[(-1, 1)]).into_iter().reduce(|m, v| m.max(&v)).unwrap()
    /// });
    /// assert_eq!(mx.apply(&x)?.to_vec(), vec![0, 5, 4, 4, 0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn window(&self, ranges: &[(i64, i64)]) -> Vec<Array<T>> {
        if ranges.len() != self.shape.len() {
            self.ctx.error(format!(
                "window {ranges:?} has {} dimensions but input `{}` has {} (shape {:?}); give one (lo, hi) range per dimension",
                ranges.len(), self.name, self.shape.len(), self.shape
            ));
            return vec![self.zeros()];
        }
        let mut out = Vec::new();
        let mut idx: Vec<i64> = ranges.iter().map(|r| r.0).collect();
        if ranges.iter().any(|r| r.0 > r.1) {
            self.ctx.error(format!(
                "window {ranges:?} of input `{}` has a range with lo > hi; write (lo, hi) with lo ≤ hi",
                self.name
            ));
            return vec![self.zeros()];
        }
        loop {
            out.push(self.tap(&idx));
            let mut d = ranges.len();
            loop {
                if d == 0 {
                    return out;
                }
                d -= 1;
                idx[d] += 1;
                if idx[d] <= ranges[d].1 {
                    break;
                }
                idx[d] = ranges[d].0;
            }
        }
    }

    /// The input at offsets that depend on array values (one `Int64` array per dimension). Only
    /// with a declared [`Stencil::neighborhood`]: offsets outside it are clamped into it (counted
    /// and reported as a warning under `KILN_DEBUG=1`), so no read ever leaves the neighbourhood.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let x = Tensor::<f32>::arange(6).cast::<f32>();
    /// let step = Int64::scalar(1);
    /// let s = kiln::stencil(|a: &Rel<f32>| a.at_var(&[&step])).neighborhood(&[(-1, 1)]);
    /// assert_eq!(s.apply(&x)?.to_vec(), vec![0.0, 2.0, 3.0, 4.0, 5.0, 0.0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn at_var(&self, offsets: &[&Int64]) -> Array<T> {
        let rank = self.shape.len();
        let Some(nb) = self.ctx.declared.clone() else {
            self.ctx.error(format!(
                "input `{}` is read at offsets that depend on array values (`at_var`), so the neighbourhood cannot be inferred; declare it with `.neighborhood(&[(lo, hi); {rank}])`",
                self.name
            ));
            return self.zeros();
        };
        if offsets.len() != rank || nb.len() != rank {
            self.ctx.error(format!(
                "at_var has {} offsets but input `{}` has {rank} dimensions; give one offset array per dimension",
                offsets.len(),
                self.name
            ));
            return self.zeros();
        }
        let mut clamped: Option<Bool> = None;
        let q: Vec<Int64> = (0..rank)
            .map(|d| {
                let o = offsets[d];
                let c = o.max(nb[d].0).min(nb[d].1);
                let moved = c.ne(o);
                clamped = Some(match clamped.take() {
                    None => moved,
                    Some(m) => &m | &moved,
                });
                &self.ctx.coords[d] + &c
            })
            .collect();
        if let Some(m) = clamped {
            self.ctx.clamped.borrow_mut().push(m);
        }
        self.general_at(&q)
    }

    fn zeros(&self) -> Array<T> {
        Array::from_id(kiln_core::literal(T::TYPE, 0, self.ctx.n))
    }

    fn tap(&self, off: &[i64]) -> Array<T> {
        let rank = self.shape.len();
        if off.len() != rank {
            self.ctx.error(format!(
                "offset {off:?} has {} dimensions but input `{}` has {rank} (shape {:?}); give one offset per dimension",
                off.len(), self.name, self.shape
            ));
            return self.zeros();
        }
        if let Some(o) = off.iter().find(|o| o.unsigned_abs() > MAX_OFFSET as u64) {
            self.ctx.error(format!(
                "offset {off:?} of input `{}` reaches {o} elements away; offsets are limited to ±{MAX_OFFSET} (a larger one would overflow the index arithmetic)",
                self.name
            ));
            return self.zeros();
        }
        if let Some(nb) = &self.ctx.declared {
            if nb.len() == rank && off.iter().zip(nb).any(|(o, r)| *o < r.0 || *o > r.1) {
                self.ctx.error(format!(
                    "offset {off:?} of input `{}` lies outside the declared neighbourhood {nb:?}; widen `.neighborhood(..)` or read inside it",
                    self.name
                ));
                return self.zeros();
            }
        }
        self.ctx.taps.borrow_mut().push((self.input, off.to_vec()));
        let value = self.tap_node(off, self.general_at(&self.shifted(off)));
        grad::seeded(&self.ctx, self.input, off, value)
    }

    /// The coordinates of the lane `off` away from the one being computed.
    fn shifted(&self, off: &[i64]) -> Vec<Int64> {
        let coords = &self.ctx.coords;
        (0..off.len())
            .map(|d| {
                if off[d] == 0 {
                    coords[d].clone()
                } else {
                    &coords[d] + off[d]
                }
            })
            .collect()
    }

    /// The flat position of coordinates `q` (inside the input) in the input.
    fn flat(&self, q: &[Int64]) -> Int64 {
        let mut flat: Option<Int64> = None;
        for (qd, stride) in q.iter().zip(&self.strides) {
            let term = qd * stride;
            flat = Some(match flat.take() {
                None => term,
                Some(f) => &f + &term,
            });
        }
        flat.expect("rank ≥ 1")
    }

    /// The read at `off` whose value at every lane is `general`: a tap node (plain shifted loads
    /// in the interior) when the input is read in place, else `general` itself.
    fn tap_node(&self, off: &[i64], general: Array<T>) -> Array<T> {
        if !self.fast {
            return general;
        }
        let meta = StencilMeta {
            shape: self.ctx.domain.clone(),
            lo: off.to_vec(),
            hi: off.to_vec(),
        };
        Array::from_id(ok(kiln_core::stencil_node(
            Op::Tap,
            self.src.id(),
            general.id(),
            meta,
        )))
    }

    /// The read at `off` where the whole box `x + off + reach` lies inside the domain, 0 at the
    /// other lanes (an adjoint's reads of a cotangent that only some lanes produced). One masked
    /// read: no boundary rule, no second mask and select around it. `reach` must hold 0 in
    /// every dimension, so that a lane inside the box reads inside the array.
    fn tap_within(&self, off: &[i64], reach: &[(i64, i64)]) -> Array<T> {
        debug_assert!(reach.iter().all(|&(lo, hi)| lo <= 0 && hi >= 0));
        let mask = box_mask(&self.ctx.coords, &self.dims, off, reach)
            .unwrap_or_else(|| Bool::scalar(true));
        let flat = self.flat(&self.shifted(off));
        let general = Array::<T>::from_id(ok(kiln_core::gather_view(
            self.src.id(),
            flat.id(),
            mask.id(),
        )));
        self.tap_node(off, general)
    }

    /// The input at coordinates `q` (one per dimension, any integers) under the boundary rule.
    fn general_at(&self, q: &[Int64]) -> Array<T> {
        let rank = self.shape.len();
        let mut inside: Option<Bool> = None;
        let mut folded = Vec::with_capacity(rank);
        for (d, dim) in self.dims.iter().enumerate().take(rank) {
            if matches!(self.ctx.boundary, Boundary::Skip | Boundary::Constant(_)) {
                let ok_d = &q[d].ge(0i64) & &q[d].lt(dim);
                inside = Some(match inside.take() {
                    None => ok_d,
                    Some(m) => &m & &ok_d,
                });
            }
            folded.push(fold_coordinate(self.ctx.boundary, &q[d], dim));
        }
        let flat = self.flat(&folded);
        let mask = inside.clone().unwrap_or_else(|| Bool::scalar(true));
        let value = if self.ctx.recorded {
            crate::memory::gather_view_masked(&self.src, &flat, &mask)
        } else {
            Array::<T>::from_id(ok(kiln_core::gather_view(
                self.src.id(),
                flat.id(),
                mask.id(),
            )))
        };
        match (self.ctx.boundary, inside) {
            (Boundary::Constant(v), Some(inside)) => {
                // (zero as a literal of T: a cast of it would be a lazy scalar of every kernel)
                let pad = if v == 0.0 {
                    Array::<T>::from_id(kiln_core::literal(T::TYPE, 0, 1usize))
                } else {
                    Float64::scalar(v).cast::<T>()
                };
                select(&inside, &value, pad)
            }
            _ => value,
        }
    }
}

/// Coordinate `q` of a dimension of size `dim` moved inside it by the boundary rule (unchanged
/// for `Skip` and `Constant`, whose reads outside are masked instead).
fn fold_coordinate(boundary: Boundary, q: &Int64, dim: &Int64) -> Int64 {
    match boundary {
        Boundary::Skip | Boundary::Constant(_) => q.clone(),
        Boundary::Nearest => q.max(0i64).min(&(dim - 1i64)),
        Boundary::Wrap => modulo(q, dim),
        Boundary::Reflect => {
            // period 2·dim: d c b a | a b c d | d c b a
            let period = dim * 2i64;
            let m = modulo(q, &period);
            select(&m.lt(dim), &m, &(&period - 1i64 - &m))
        }
        Boundary::Mirror => {
            // period 2·dim − 2 (at least 1): d c b | a b c d | c b a
            let period = (dim * 2i64 - 2i64).max(1i64);
            let m = modulo(q, &period);
            select(&m.lt(dim), &m, &(&period - &m))
        }
    }
}

/// `x mod m` in `[0, m)` for any sign of `x` (`m > 0`).
fn modulo(x: &Int64, m: &Int64) -> Int64 {
    let r = x % m;
    select(&r.lt(0i64), &(&r + m), &r)
}

/// Inputs a stencil can be applied to: one tensor, or a tuple of tensors (all relatively indexed;
/// the first sets the output's shape).
pub trait StencilInputs {
    /// The [`Rel`] handles the kernel closure takes.
    type Rels;
    #[doc(hidden)]
    fn rels(&self, ctx: &Rc<Ctx>, fast: &dyn Fn(usize) -> bool) -> Self::Rels;
    #[doc(hidden)]
    fn shapes(&self) -> Vec<Vec<usize>>;
    #[doc(hidden)]
    fn names(&self) -> Vec<String>;
    #[doc(hidden)]
    fn arrays(&self) -> Vec<kiln_core::VarId>;
    /// Each input's node in the AD graph (0: it carries no gradient).
    #[doc(hidden)]
    fn ads(&self) -> Vec<u32>;
}

fn name_of<T: Scalar>(t: &Tensor<T>, i: usize) -> String {
    t.array()
        .get_label()
        .unwrap_or_else(|| format!("input {i}"))
}

impl<T: Scalar> StencilInputs for &Tensor<T> {
    type Rels = Rel<T>;
    fn rels(&self, ctx: &Rc<Ctx>, fast: &dyn Fn(usize) -> bool) -> Rel<T> {
        Rel::new(ctx, self, name_of(self, 0), fast(0), 0)
    }
    fn shapes(&self) -> Vec<Vec<usize>> {
        vec![self.shape().to_vec()]
    }
    fn names(&self) -> Vec<String> {
        vec![name_of(self, 0)]
    }
    fn arrays(&self) -> Vec<kiln_core::VarId> {
        vec![self.array().id()]
    }
    fn ads(&self) -> Vec<u32> {
        vec![self.array().ad]
    }
}

macro_rules! tuple_inputs {
    ($($t:ident $i:tt),+) => {
        impl<$($t: Scalar),+> StencilInputs for ($(&Tensor<$t>,)+) {
            type Rels = ($(Rel<$t>,)+);
            fn rels(&self, ctx: &Rc<Ctx>, fast: &dyn Fn(usize) -> bool) -> Self::Rels {
                ($(Rel::new(ctx, self.$i, name_of(self.$i, $i), fast($i), $i),)+)
            }
            fn shapes(&self) -> Vec<Vec<usize>> {
                vec![$(self.$i.shape().to_vec()),+]
            }
            fn names(&self) -> Vec<String> {
                vec![$(name_of(self.$i, $i)),+]
            }
            fn arrays(&self) -> Vec<kiln_core::VarId> {
                vec![$(self.$i.array().id()),+]
            }
            fn ads(&self) -> Vec<u32> {
                vec![$(self.$i.array().ad),+]
            }
        }
    };
}
tuple_inputs!(A 0, B 1);
tuple_inputs!(A 0, B 1, C 2);
tuple_inputs!(A 0, B 1, C 2, D 3);

/// A kernel closure for inputs `I`: `Fn(&Rel<T>) -> Array<U>` for one input,
/// `Fn((&Rel<A>, &Rel<B>)) -> Array<U>` for two, and so on.
pub trait StencilFn<I: StencilInputs> {
    /// The output's element type.
    type Out: Scalar;
    #[doc(hidden)]
    fn call(&self, rels: &I::Rels) -> Array<Self::Out>;
}

impl<T: Scalar, U: Scalar, F: Fn(&Rel<T>) -> Array<U>> StencilFn<&Tensor<T>> for F {
    type Out = U;
    fn call(&self, rels: &Rel<T>) -> Array<U> {
        self(rels)
    }
}

macro_rules! tuple_fn {
    ($($t:ident $i:tt),+) => {
        impl<'t, $($t: Scalar,)+ U: Scalar, F: Fn(($(&Rel<$t>,)+)) -> Array<U>>
            StencilFn<($(&'t Tensor<$t>,)+)> for F
        {
            type Out = U;
            fn call(&self, rels: &($(Rel<$t>,)+)) -> Array<U> {
                self(($(&rels.$i,)+))
            }
        }
    };
}
tuple_fn!(A 0, B 1);
tuple_fn!(A 0, B 1, C 2);
tuple_fn!(A 0, B 1, C 2, D 3);

impl<F> Stencil<F> {
    /// Declare the neighbourhood, one inclusive `(lo, hi)` per dimension, instead of inferring it
    /// from the offsets read. It decides the border even where the kernel reads less (Numba's
    /// `neighborhood`), and it is required for [`Rel::at_var`].
    pub fn neighborhood(mut self, ranges: &[(i64, i64)]) -> Self {
        self.neighborhood = Some(ranges.to_vec());
        self
    }
    /// The value of border elements under [`Boundary::Skip`] (default 0; NaN and ±inf are
    /// valid). Converted to the kernel's element type as a cast would.
    pub fn cval(mut self, value: impl Into<f64>) -> Self {
        self.cval = Some(value.into());
        self
    }
    /// How the border is computed (default [`Boundary::Skip`]).
    pub fn boundary(mut self, mode: Boundary) -> Self {
        self.boundary = mode;
        self
    }
    /// `false`: evaluate the result at once instead of leaving it lazy to fuse with its consumers
    /// (for comparisons and debugging).
    pub fn fuse(mut self, fuse: bool) -> Self {
        self.fuse = fuse;
        self
    }
    /// The neighbourhood the last application used (declared, or inferred from the offsets read):
    /// `None` before the first.
    pub fn inferred_neighborhood(&self) -> Option<Vec<(i64, i64)>> {
        self.inferred.lock().clone()
    }

    /// Apply the stencil: a lazy tensor of the first input's shape.
    pub fn apply<I: StencilInputs>(&self, inputs: I) -> Result<Tensor<F::Out>>
    where
        F: StencilFn<I>,
    {
        self.run(&inputs, None)
    }

    /// Apply the stencil into `out` (Numba's `out=`): interior elements are replaced; with
    /// [`Boundary::Skip`] and no `cval` the border keeps `out`'s values, otherwise it is computed
    /// (or set to `cval`) as by [`Stencil::apply`].
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let a = Tensor::<i64>::arange(12).reshape(&[3, 4]);
    /// let k = kiln::stencil(|a: &Rel<i64>| a.at([0, 0]) - a.at([1, 0]));
    /// let mut out = Tensor::<i64>::ones(&[3, 4]);
    /// k.apply_into(&a, &mut out)?;
    /// assert_eq!(out.to_vec(), vec![-4, -4, -4, -4, -4, -4, -4, -4, 1, 1, 1, 1]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn apply_into<I: StencilInputs>(&self, inputs: I, out: &mut Tensor<F::Out>) -> Result<()>
    where
        F: StencilFn<I>,
    {
        let shape = inputs.shapes()[0].clone();
        if out.shape() != shape.as_slice() {
            return Err(Error::Stencil(format!(
                "`out` has shape {:?} but input `{}` has shape {shape:?}; the output must have the first input's shape",
                out.shape(),
                inputs.names()[0]
            )));
        }
        *out = self.run(&inputs, Some(out))?;
        Ok(())
    }

    fn run<I: StencilInputs>(
        &self,
        inputs: &I,
        out: Option<&Tensor<F::Out>>,
    ) -> Result<Tensor<F::Out>>
    where
        F: StencilFn<I>,
    {
        let ads = inputs.ads();
        let out_ad = out.map_or(0, |o| o.array().ad);
        let mut differentiate = crate::ad::recording()
            && F::Out::TYPE.is_float()
            && (ads.iter().any(|&a| a != 0) || out_ad != 0);
        let shapes = inputs.shapes();
        let names = inputs.names();
        let domain = shapes[0].clone();
        let rank = domain.len();
        if rank == 0 {
            return Err(Error::Stencil(format!(
                "input `{}` is a scalar (rank 0); a stencil needs at least one dimension — reshape it to [1]",
                names[0]
            )));
        }
        self.check_options(rank, &names[0])?;
        for (i, s) in shapes.iter().enumerate().skip(1) {
            if s.len() != rank {
                return Err(Error::Stencil(format!(
                    "input `{}` has {} dimensions (shape {s:?}) but the first input `{}` has {rank} (shape {domain:?}); relatively indexed inputs need the same rank",
                    names[i], s.len(), names[0]
                )));
            }
            if let Some(d) = (0..rank).find(|&d| s[d] < domain[d]) {
                return Err(Error::Stencil(format!(
                    "secondary input `{}` has size {} in dimension {d} (shape {s:?}), smaller than the first input `{}`'s {} (shape {domain:?}); every relatively indexed input must be at least as large as the first",
                    names[i], s[d], names[0], domain[d]
                )));
            }
        }
        let ids = inputs.arrays();
        for (i, (s, &id)) in shapes.iter().zip(&ids).enumerate() {
            // compared as sizes: inside a frozen function, lanes compressed away by a branch
            // are a count known only as the replay runs, and it must find this check again
            let len = kiln_core::freeze::size_of(id);
            if !len.same_as(s.iter().product::<usize>()) {
                return Err(Error::Stencil(format!(
                    "input `{}` holds {len} elements but its shape {s:?} has {}: a stencil reads neighbours by position, which the lanes an evaluated loop or branch compressed away no longer have; apply the stencil outside the branch, or run the loop with `.compress(false)`",
                    names[i],
                    s.iter().product::<usize>()
                )));
            }
        }
        let n: usize = domain.iter().product();
        let taps_guess: usize = self
            .neighborhood
            .clone()
            .or_else(|| self.inferred_neighborhood())
            .map(|nb| {
                nb.iter()
                    .map(|(l, h)| (h - l + 1).max(1) as usize)
                    .product()
            })
            .unwrap_or(9);
        let fast = ids
            .iter()
            .zip(&names)
            .map(|(&id, name)| readable_at_offsets(id, name, taps_guess, false))
            .collect::<Result<Vec<bool>>>()?;
        // recorded: the application as gathers with their derivatives recorded, which any order
        // differentiates — inside a transformation whose derivatives are differentiated again,
        // and for reads at value-dependent offsets (`at_var`), which the adjoint-stencil rule
        // (first order, constant offsets) does not take
        let trace = |recorded: bool| {
            let params = Params::default();
            let coords = coordinates(&domain, &Int64::arange(n), &params);
            let mut ctx = Ctx::new(
                &domain,
                coords,
                n,
                self.boundary,
                self.neighborhood.clone(),
                params,
            );
            ctx.recorded = recorded;
            let ctx = Rc::new(ctx);
            let rels = inputs.rels(&ctx, &|i| fast[i] && !recorded);
            let value = self.f.call(&rels);
            drop(rels);
            (ctx, value)
        };
        let mut recorded =
            crate::ad::recording() && crate::ad::higher_order() && F::Out::TYPE.is_float();
        let (mut ctx, mut value) = trace(recorded);
        // an array with a gradient the kernel captured (a weight, a per-lane field): the reads
        // of the inputs carry none
        let captures_grad = crate::ad::recording() && value.grad_enabled();
        differentiate |= captures_grad;
        if let Some(e) = ctx.errors.borrow().first() {
            return Err(Error::Stencil(e.clone()));
        }
        if differentiate && !recorded && !ctx.clamped.borrow().is_empty() {
            recorded = true;
            (ctx, value) = trace(true);
        }
        let taps: Vec<Vec<i64>> = ctx.taps.borrow().iter().map(|t| t.1.clone()).collect();
        if taps.is_empty() && ctx.clamped.borrow().is_empty() {
            return Err(Error::Stencil(format!(
                "the kernel never reads a relatively indexed input (no `a.at(..)` of `{}`); a stencil computes each element from its neighbours — use an elementwise expression instead",
                names[0]
            )));
        }
        let nb = match &self.neighborhood {
            Some(nb) => nb.clone(),
            None => (0..rank)
                .map(|d| {
                    let lo = taps.iter().map(|t| t[d]).min().unwrap_or(0);
                    let hi = taps.iter().map(|t| t[d]).max().unwrap_or(0);
                    (lo, hi)
                })
                .collect(),
        };
        *self.inferred.lock() = Some(nb.clone());
        let value_id = value.id();
        let value = if value.len() == n {
            value
        } else {
            // a kernel whose value does not vary (e.g. reads only captured scalars) broadcasts
            crate::memory::gather_view(&value, &crate::array::UInt32::zeros(n))
        };
        if kiln_core::schedule::debug_mode() {
            for m in ctx.clamped.borrow().iter() {
                let lanes = m.count();
                if lanes > 0 {
                    tracing::warn!(target: "kiln::stencil", "stencil input `{}`: {lanes} lane(s) read at value-dependent offsets outside the declared neighbourhood {nb:?}; they were clamped into it", names[0]);
                }
            }
        }
        let result = if self.boundary == Boundary::Skip {
            let dims: Vec<Int64> = domain.iter().map(|&d| ctx.params.get(d)).collect();
            let inside = interior_mask(&ctx.coords, &dims, &nb);
            let border: Array<F::Out> = match (self.cval, out) {
                (Some(v), _) => Float64::scalar(v).cast::<F::Out>(),
                (None, Some(o)) => o.array().clone(),
                (None, None) => Array::from_id(kiln_core::literal(F::Out::TYPE, 0, 1)),
            };
            match inside {
                None => value,
                Some(inside) if recorded => select(&inside, &value, &border),
                Some(inside) => {
                    let general = select(&inside, &value, &border);
                    let meta = StencilMeta {
                        shape: domain.clone(),
                        lo: nb.iter().map(|r| r.0).collect(),
                        hi: nb.iter().map(|r| r.1).collect(),
                    };
                    Array::from_id(kiln_core::stencil_node(
                        Op::Split,
                        value.id(),
                        general.id(),
                        meta,
                    )?)
                }
            }
        } else {
            value
        };
        // what the partials of this application may be looked up under: the structure of the
        // value just traced (a kernel that captured a gradient takes its partials afresh)
        let signature = (differentiate && !recorded && !captures_grad)
            .then(|| kiln_core::expression_signature(value_id, &ids, grad::SIGNATURE_LIMIT))
            .flatten();
        let result = if differentiate && !recorded {
            let trace = |c: &Rc<Ctx>, fast_ok: bool| {
                let rels = inputs.rels(c, &|i| fast_ok && fast[i]);
                self.f.call(&rels)
            };
            let what = grad::Application {
                ctx: &ctx,
                name: &names[0],
                nb: &nb,
                shapes: &shapes,
                ids: &ids,
                ads: &ads,
                out_ad: if self.cval.is_none() { out_ad } else { 0 },
                trace: &trace,
                cache: signature.map(|sig| (&*self.partials, sig)),
            };
            grad::record(&what, result)?
        } else {
            result
        };
        let t = Tensor::try_from_array(result, &domain)?;
        if !self.fuse {
            t.try_eval()?;
        }
        Ok(t)
    }

    fn check_options(&self, rank: usize, name: &str) -> Result<()> {
        if self.cval.is_some() && self.boundary != Boundary::Skip {
            return Err(Error::Stencil(format!(
                "`cval` is the value of skipped border elements, but boundary {:?} computes every element; use `Boundary::Constant(v)` to pad reads outside input `{name}` with v",
                self.boundary
            )));
        }
        if let Some(nb) = &self.neighborhood {
            if nb.len() != rank {
                return Err(Error::Stencil(format!(
                    "{} dimensional neighborhood specified for {rank} dimensional input array `{name}`; give one (lo, hi) pair per dimension",
                    nb.len()
                )));
            }
            if let Some(d) = (0..rank).find(|&d| {
                nb[d].0.unsigned_abs() > MAX_OFFSET as u64
                    || nb[d].1.unsigned_abs() > MAX_OFFSET as u64
            }) {
                return Err(Error::Stencil(format!(
                    "neighborhood {nb:?} reaches beyond ±{MAX_OFFSET} elements in dimension {d}; offsets that large would overflow the index arithmetic"
                )));
            }
            if let Some(d) = (0..rank).find(|&d| nb[d].0 > nb[d].1) {
                return Err(Error::Stencil(format!(
                    "neighborhood {nb:?} has lo {} > hi {} in dimension {d}; write each range as (lo, hi) with lo ≤ hi",
                    nb[d].0, nb[d].1
                )));
            }
        }
        Ok(())
    }
}

/// The coordinates per dimension of the lanes at flat positions `flat` of a row-major `domain`. The divisions run
/// in `f64` (`floor((i + 0.5) / d)` is exact below 2^52 and vectorises; integer division does not).
fn coordinates(domain: &[usize], flat: &Int64, params: &Params) -> Vec<Int64> {
    let rank = domain.len();
    let mut coords = vec![Int64::scalar(0); rank];
    let mut rest = flat.clone();
    for d in (0..rank).rev() {
        if d == 0 {
            coords[0] = rest.clone();
            break;
        }
        let dim = params.get(domain[d]);
        // (an evaluated f64, not a cast of `dim`: a lazy scalar would be settled before every
        // kernel that reads these coordinates, such as a gradient's)
        let dim_f = Float64::from_slice(&[domain[d] as f64]);
        let q = ((rest.cast::<f64>() + 0.5) / &dim_f).floor().cast::<i64>();
        coords[d] = &rest - &(&q * &dim);
        rest = q;
    }
    coords
}

/// Whether input `id` can be read at offsets: a lazy input is recomputed at each tap when that is
/// cheaper than storing it (`false`: read through the general meaning), or evaluated first.
/// With `store_shared`, the values it is computed from that something else holds and that read
/// other lanes are stored by the same kernel (a cotangent summed over steps; not a forward
/// input, whose shared values are often taps an AD rule holds).
fn readable_at_offsets(
    id: kiln_core::VarId,
    name: &str,
    taps_guess: usize,
    store_shared: bool,
) -> Result<bool> {
    if kiln_core::is_evaluated(id) {
        return Ok(true);
    }
    // (the walk stops where the answer is known: past 24 / taps operations it is evaluated)
    let (ops, reads_others) = kiln_core::lazy_cost(id, 24 / taps_guess.max(1) + 1);
    if !kiln_core::control::symbolic() && !reads_others && ops * taps_guess <= 24 {
        tracing::debug!(target: "kiln::stencil", "input `{name}`: its {ops}-op expression is recomputed at each of ~{taps_guess} taps (cheaper than storing it)");
        return Ok(false);
    }
    tracing::debug!(target: "kiln::stencil", "input `{name}`: its expression ({ops}+ ops{}) is evaluated first, then read by ~{taps_guess} taps", if reads_others { ", reading other lanes" } else { "" });
    let mut roots = if store_shared {
        kiln_core::shared_operands(id, 64)
    } else {
        Vec::new()
    };
    roots.push(id);
    kiln_core::eval(&roots)?;
    Ok(kiln_core::is_evaluated(id))
}

/// Lanes whose whole neighbourhood lies inside the domain (`None`: every lane does).
fn interior_mask(coords: &[Int64], dims: &[Int64], nb: &[(i64, i64)]) -> Option<Bool> {
    box_mask(coords, dims, &vec![0; coords.len()], nb)
}

/// Lanes `x` whose box `x + shift + nb` lies inside the domain (`None`: every lane's does).
fn box_mask(coords: &[Int64], dims: &[Int64], shift: &[i64], nb: &[(i64, i64)]) -> Option<Bool> {
    let mut mask: Option<Bool> = None;
    let mut and = |m: Bool| {
        mask = Some(match mask.take() {
            None => m,
            Some(x) => &x & &m,
        })
    };
    for d in 0..coords.len() {
        let below = -(shift[d] + nb[d].0);
        let above = shift[d] + nb[d].1;
        if below > 0 {
            and(coords[d].ge(below));
        }
        if above > 0 {
            and((&coords[d] + above).lt(&dims[d]));
        }
    }
    mask
}

/// The median of a list of arrays, lane by lane (as `f64`; the mean of the two middle values for
/// an even count, like NumPy). Pairs with [`Rel::window`] for median filters.
///
/// ```
/// use kiln::prelude::*;
/// let v = [Int32::from_slice(&[3, 9]), Int32::from_slice(&[1, 2]), Int32::from_slice(&[2, 4])];
/// assert_eq!(kiln::median(&v).to_vec(), vec![2.0, 4.0]);
/// ```
pub fn median<T: Numeric>(values: &[Array<T>]) -> Float64 {
    assert!(!values.is_empty(), "kiln::median of an empty list");
    let mut v: Vec<Float64> = values.iter().map(|a| a.cast::<f64>()).collect();
    let n = v.len();
    // odd-even transposition sort: n rounds of compare-exchange (min/max) pairs
    for round in 0..n {
        let mut i = round % 2;
        while i + 1 < n {
            let (lo, hi) = (v[i].min(&v[i + 1]), v[i].max(&v[i + 1]));
            v[i] = lo;
            v[i + 1] = hi;
            i += 2;
        }
    }
    if n % 2 == 1 {
        v[n / 2].clone()
    } else {
        (&v[n / 2 - 1] + &v[n / 2]) * 0.5
    }
}
