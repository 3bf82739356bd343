//! `Array<T>`: a typed handle to a traced or evaluated variable, and everything that creates or reads one.
//!
//! A handle is an id plus a reference count in the engine's registry: cloning is cheap, dropping
//! releases, and nothing is computed until a value is needed. Operators live in `ops`, math in
//! `math`, memory operations and reductions in `memory` and `reduce`.

use crate::types::{Float, Numeric};
use kiln_core::{self as core, Error, Op, Result, Scalar, Size, VarId, VarType};
use std::fmt;
use std::marker::PhantomData;

/// A one-dimensional array of `T`, traced lazily and evaluated by fused JIT-compiled kernels.
///
/// ```
/// use kiln::prelude::*;
/// let x = Float32::arange(4);
/// let y = &x * 2.0 + 1.0;            // traced, not run
/// assert_eq!(y.to_vec(), vec![1.0, 3.0, 5.0, 7.0]);
/// ```
pub struct Array<T: Scalar> {
    /// The engine reference (released when the array drops).
    h: core::Handle,
    /// The AD graph node when the array can carry a gradient (`crate::ad`), else 0.
    pub(crate) ad: crate::ad::AdIndex,
    _t: PhantomData<fn() -> T>,
}

/// Masks.
pub type Bool = Array<bool>;
pub type Int32 = Array<i32>;
pub type UInt32 = Array<u32>;
pub type Int64 = Array<i64>;
pub type UInt64 = Array<u64>;
pub type Float32 = Array<f32>;
pub type Float64 = Array<f64>;

impl<T: Scalar> Clone for Array<T> {
    fn clone(&self) -> Self {
        crate::ad::graph::inc_ref(self.ad);
        Array {
            h: self.h.clone(),
            ad: self.ad,
            _t: PhantomData,
        }
    }
}

impl<T: Scalar> Drop for Array<T> {
    fn drop(&mut self) {
        // (the engine reference goes with the handle)
        crate::ad::graph::dec_ref(self.ad);
    }
}

/// Unwrap an engine result at a call site whose signature cannot return `Result` (operators):
/// the panic message is the error's, which says what to do.
#[track_caller]
pub(crate) fn ok<R>(r: Result<R>) -> R {
    match r {
        Ok(v) => v,
        Err(e) => raise(e),
    }
}

/// Panic with an engine error. A read refused inside a frozen function's recording (`item()`,
/// `to_vec()`, `any()` in the function) is the frozen call's `Err`, not a crash: it unwinds to the
/// recording with a private payload through `resume_unwind`, which does not run the panic hook,
/// so nothing is printed for an error the caller gets back.
#[track_caller]
pub(crate) fn raise(e: Error) -> ! {
    if matches!(e, Error::FrozenRead { .. }) && core::freeze::in_recording() {
        crate::freeze::unwind_refused_read(e);
    }
    panic!("kiln: {e}")
}

impl<T: Scalar> Array<T> {
    /// Wrap an id that carries one external reference (taken over by the handle). Panics if the
    /// variable's type is not `T`; see [`Array::try_from_id`].
    #[track_caller]
    pub fn from_id(id: VarId) -> Self {
        ok(Self::try_from_id(id))
    }
    /// As [`Array::from_id`], returning an error naming both types when the variable's type is
    /// not `T`. On error the reference stays with the caller (wrap it with the right type, or
    /// release it with `kiln_core::dec_ref`).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let id = Float32::from_slice(&[1.0]).into_id();
    /// assert!(Float64::try_from_id(id).is_err());
    /// let back = Float32::try_from_id(id).unwrap();
    /// ```
    pub fn try_from_id(id: VarId) -> Result<Self> {
        let ty = core::var_type(id);
        if ty != T::TYPE {
            return Err(Error::Invalid(format!(
                "{} holds {ty} values and cannot be wrapped as an Array<{}>; wrap it as an Array<{ty}> and `cast::<{}>()` that if you need {} values",
                core::describe(id),
                T::TYPE,
                T::TYPE,
                T::TYPE
            )));
        }
        Ok(Self::wrap(id))
    }
    /// As [`Array::from_id`] for an id whose type is known to be `T` (the engine calls below
    /// create it with `T::TYPE`): no registry lookup.
    pub(crate) fn wrap(id: VarId) -> Self {
        debug_assert_eq!(core::var_type(id), T::TYPE, "type of var {id:?}");
        Array {
            h: core::Handle::own(id),
            ad: 0,
            _t: PhantomData,
        }
    }
    /// A handle on `id` (whose reference it takes over) at this array's place in the AD graph:
    /// the same value in another variable, for an evaluation that keeps the derivatives.
    pub(crate) fn same_node(&self, id: VarId) -> Self {
        crate::ad::graph::inc_ref(self.ad);
        Array::wrap(id).with_ad(self.ad)
    }
    /// This handle with AD node `ad` (whose reference it takes over) in place of its own.
    pub(crate) fn with_ad(mut self, ad: crate::ad::AdIndex) -> Self {
        crate::ad::graph::dec_ref(std::mem::replace(&mut self.ad, ad));
        self
    }
    /// The engine id (for kiln-core interop).
    pub fn id(&self) -> VarId {
        self.h.id()
    }
    /// Give up the handle without releasing its reference. The id carries no gradient: an
    /// array rebuilt from it (`Array::from_id`) is detached from the AD graph.
    pub fn into_id(self) -> VarId {
        // a reference for the caller; this handle's own goes when it drops, with its AD node
        let id = self.id();
        core::inc_ref(id);
        id
    }

    /// An evaluated array holding a copy of `data`.
    ///
    /// ```
    /// let a = kiln::Int32::from_slice(&[1, 2, 3]);
    /// assert_eq!(a.len(), 3);
    /// ```
    pub fn from_slice(data: &[T]) -> Self {
        ok(Self::try_from_slice(data))
    }
    /// As [`Array::from_slice`], returning an error if memory runs out.
    pub fn try_from_slice(data: &[T]) -> Result<Self> {
        // one copy, straight into kiln's buffer
        Ok(Self::wrap(core::from_scalars(data)?))
    }
    /// An evaluated array taking the values of `data`.
    ///
    /// ```
    /// let a = kiln::Float64::from_vec(vec![0.5, 1.5]);
    /// assert_eq!(a.to_vec(), vec![0.5, 1.5]);
    /// ```
    pub fn from_vec(data: Vec<T>) -> Self {
        Self::from_slice(&data)
    }
    /// `n` copies of `value` (a literal: no memory until evaluated, folded into kernels).
    ///
    /// ```
    /// assert_eq!(kiln::UInt32::full(7, 2).to_vec(), vec![7, 7]);
    /// ```
    ///
    /// `n` may be a [`Size`] (`x.size()`), which inside a frozen function follows the inputs.
    /// `n` may also be any integer type (`10u32`, `n as i64`); a negative one panics, naming it.
    #[track_caller]
    pub fn full(value: T, n: impl IntoSize) -> Self {
        Self::wrap(core::literal(T::TYPE, value.to_bits64(), n.into_size()))
    }
    /// A size-1 array holding `value` in memory rather than as a literal: kernels read it, so a
    /// new value needs no new kernel and no new recording of a frozen function.
    ///
    /// ```
    /// let seed = kiln::UInt32::opaque(7);
    /// assert!(seed.is_evaluated());
    /// assert_eq!(seed.item(), 7);
    /// ```
    pub fn opaque(value: T) -> Self {
        crate::make_opaque(&Self::scalar(value))
    }
    /// A size-1 literal.
    pub fn scalar(value: T) -> Self {
        Self::full(value, 1)
    }

    /// Number of elements.
    ///
    /// ```
    /// assert_eq!(kiln::Float32::zeros(5).len(), 5);
    /// ```
    ///
    /// Inside a frozen function, prefer [`Array::size`] for sizing new arrays: a plain integer that
    /// depends on the inputs' sizes ties the recording to those sizes.
    #[track_caller]
    pub fn len(&self) -> usize {
        core::freeze::observe_len(self.h.id())
    }
    /// The number of elements as a [`Size`], which inside a frozen function remembers how it
    /// follows from the inputs' sizes (`arange(x.size() / 2)` replays at any width).
    ///
    /// ```
    /// let x = kiln::Float32::zeros(10);
    /// let half = kiln::UInt32::arange(x.size() / 2);
    /// assert_eq!(half.len(), 5);
    /// ```
    pub fn size(&self) -> Size {
        core::freeze::size_of(self.h.id())
    }
    /// Whether the array has no elements.
    ///
    /// ```
    /// assert!(kiln::Float32::zeros(0).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        core::freeze::observe_empty(self.h.id())
    }
    /// Whether the contents are evaluated (in memory).
    pub fn is_evaluated(&self) -> bool {
        core::is_evaluated(self.h.id())
    }

    /// The address of the buffer holding the contents, if evaluated (`None` while lazy). Two
    /// arrays with the same address share one buffer; a result written in place into an operand
    /// (update-in-place) has the operand's old address. For tests and diagnostics only.
    ///
    /// ```
    /// let x = kiln::Float64::arange(1000);
    /// x.eval();
    /// let before = x.buffer_addr();
    /// let y = x + 1.0; // `x` moved: nothing else can see it
    /// y.eval();
    /// assert_eq!(y.buffer_addr(), before);
    /// ```
    pub fn buffer_addr(&self) -> Option<usize> {
        core::buffer_addr(self.h.id())
    }

    /// Evaluate `expr` into this array's buffer (a caller-provided output): when this array is
    /// the only holder of its evaluated buffer, `expr`'s kernel stores straight into it and no
    /// operand of `expr` is reused (DAPHNE's rule when the caller passes the result); otherwise
    /// (a clone or view shares it, or it is lazy) `expr` gets a new buffer and the others keep
    /// the old values (copy-on-write). `expr` may read this array elementwise
    /// (`y.assign(&y * 2.0)`). The sizes must be equal.
    ///
    /// ```
    /// use kiln::Float64;
    /// let mut y = Float64::zeros(4);
    /// y.eval();
    /// let before = y.buffer_addr();
    /// let x = Float64::arange(4);
    /// y.assign(&x * 2.0 + 1.0);
    /// assert_eq!(y.to_vec(), vec![1.0, 3.0, 5.0, 7.0]);
    /// assert_eq!(y.buffer_addr(), before);
    /// ```
    #[track_caller]
    pub fn assign(&mut self, expr: impl IntoArray<T>) {
        ok(self.try_assign(expr))
    }

    /// As [`Array::assign`], returning an error naming both sizes when they differ (and any
    /// evaluation error).
    pub fn try_assign(&mut self, expr: impl IntoArray<T>) -> Result<()> {
        let mut expr = expr.into_array();
        // compared as sizes, not numbers: inside a frozen function a replay whose sizes break
        // (or newly meet) the check records anew and reports what an unfrozen call would
        let (n, m) = (expr.size(), self.size());
        if !n.same_as(m) {
            return Err(core::Error::Invalid(format!(
                "assign: {} has {n} elements but the target {} has {m}; assign a value of the target's size (`Array::full` for a constant), or rebind with `x = expr`",
                core::describe(expr.h.id()),
                core::describe(self.h.id())
            )));
        }
        core::schedule::eval_into(expr.h.id_mut(), self.h.id())?;
        *self = expr;
        Ok(())
    }

    /// Name the array (shown by `whos()`, logs and error messages); returns it for chaining.
    ///
    /// ```
    /// let x = kiln::Float32::zeros(3).label("x");
    /// assert_eq!(x.get_label().as_deref(), Some("x"));
    /// ```
    pub fn label(self, name: &str) -> Self {
        core::set_label(self.h.id(), name);
        self
    }
    /// The label, if any.
    pub fn get_label(&self) -> Option<String> {
        core::label(self.h.id())
    }

    /// Evaluate now (one kernel for everything of this size that is pending with it).
    /// Panics with the error's message if evaluation fails; see [`Array::try_eval`].
    ///
    /// ```
    /// let y = kiln::Float32::arange(3) * 2.0;
    /// y.eval();
    /// assert!(y.is_evaluated());
    /// ```
    #[track_caller]
    pub fn eval(&self) -> &Self {
        ok(self.try_eval());
        self
    }
    /// Evaluate now, returning errors (out of memory, compilation) instead of panicking.
    pub fn try_eval(&self) -> Result<&Self> {
        core::eval(&[self.h.id()])?;
        Ok(self)
    }

    /// Copy the contents to a `Vec` (evaluates first). Panics on error; see [`Array::try_to_vec`].
    #[track_caller]
    pub fn to_vec(&self) -> Vec<T> {
        ok(self.try_to_vec())
    }
    /// Copy the contents to a `Vec`, returning errors instead of panicking.
    ///
    /// ```
    /// let v = kiln::Int32::arange(3).try_to_vec().unwrap();
    /// assert_eq!(v, vec![0, 1, 2]);
    /// ```
    pub fn try_to_vec(&self) -> Result<Vec<T>> {
        let bytes = core::read_bytes(self.h.id())?;
        let w = T::TYPE.size_bytes();
        Ok(bytes
            .chunks_exact(w)
            .map(|c| {
                let mut b = [0u8; 8];
                b[..w].copy_from_slice(c);
                T::from_bits64(u64::from_le_bytes(b))
            })
            .collect())
    }
    /// The single element of a size-1 array. Panics if the size is not 1; see [`Array::try_item`].
    #[track_caller]
    pub fn item(&self) -> T {
        ok(self.try_item())
    }
    /// The single element, or `Err(NotScalar)` naming the size.
    ///
    /// ```
    /// assert!(kiln::Float32::zeros(3).try_item().is_err());
    /// assert_eq!(kiln::Float32::from(2.5).try_item().unwrap(), 2.5);
    /// ```
    pub fn try_item(&self) -> Result<T> {
        // a literal of a size that follows a frozen function's inputs is read without the device:
        // a replay at a size where the answer changes records anew
        let n = self.size();
        if !n.same_as(1) {
            return Err(Error::NotScalar {
                label: core::describe(self.h.id()),
                size: n.peek(),
            });
        }
        if let Some(bits) = core::literal_value(self.h.id()) {
            return Ok(T::from_bits64(bits));
        }
        Ok(self.try_to_vec()?[0])
    }

    /// Convert each element to `U` with Rust `as` semantics (float→int saturates, NaN → 0).
    ///
    /// ```
    /// let x = kiln::Float32::from_slice(&[1.7, -2.5, f32::NAN]);
    /// assert_eq!(x.cast::<i32>().to_vec(), vec![1, -2, 0]);
    /// ```
    pub fn cast<U: Scalar>(&self) -> Array<U> {
        let out = Array::wrap(ok(core::convert(Op::Cast, self.h.id(), U::TYPE)));
        crate::ad::rules::record_cast(self, out)
    }
    /// Reinterpret the bits as `U` (same width).
    ///
    /// ```
    /// let x = kiln::Float32::from(1.0f32);
    /// assert_eq!(x.bitcast::<u32>().item(), 0x3f80_0000);
    /// ```
    pub fn bitcast<U: Scalar>(&self) -> Array<U> {
        Array::wrap(ok(core::convert(Op::Bitcast, self.h.id(), U::TYPE)))
    }

    /// Apply a core op to this array and others of the same type.
    pub(crate) fn apply(op: Op, args: &[&Array<T>]) -> Result<Self> {
        let ids: Vec<VarId> = args.iter().map(|a| a.id()).collect();
        let out = Self::wrap(core::op(op, &ids)?);
        Ok(crate::ad::rules::record_op(op, args, out))
    }
    /// Apply a comparison.
    pub(crate) fn compare(op: Op, a: &Array<T>, b: &Array<T>) -> Result<Bool> {
        Ok(Bool::wrap(core::op(op, &[a.id(), b.id()])?))
    }
}

/// Indexing: NumPy's `a[i]`, `a[start:stop:step]` and `np.concatenate`, as lazy views. Each
/// result is an `Array` that reads the source at computed positions inside the kernel that uses
/// it (`gather_view`: no copy, no launch of its own). Positions may be negative (counted from the
/// end). These panic on a position out of range, naming it; the `try_` twins return the error.
impl<T: Scalar> Array<T> {
    /// Element `i` (negative: from the end) as a size-1 array, like NumPy's `a[i]`.
    ///
    /// ```
    /// let a = kiln::Int32::arange(5) * 10;
    /// assert_eq!(a.at(1).item(), 10);
    /// assert_eq!(a.at(-1).item(), 40);
    /// ```
    #[track_caller]
    pub fn at(&self, i: impl TryInto<isize>) -> Array<T> {
        ok(self.try_at(i))
    }
    /// As [`Array::at`], returning an error naming the position and the length.
    pub fn try_at(&self, i: impl TryInto<isize>) -> Result<Array<T>> {
        let i = i.try_into().unwrap_or(isize::MAX);
        self.try_slice(crate::tensor::SliceArg::Index(i))
    }
    /// The elements in `range` (any Rust range of `i32`, `isize` or `usize`; negative positions
    /// count from the end), with a step through [`SliceArg::step`](crate::tensor::SliceArg::step)
    /// (negative: backwards), like NumPy's `a[start:stop:step]`. A lazy view. As in ndarray and
    /// [`Tensor::slice`](crate::Tensor::slice), a position beyond either end is an error (NumPy
    /// would clamp it).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// use kiln::tensor::SliceArg;
    /// let a = Int32::arange(6);
    /// assert_eq!(a.slice(1..4).to_vec(), vec![1, 2, 3]);
    /// assert_eq!(a.slice(-2..).to_vec(), vec![4, 5]);
    /// assert_eq!(a.slice(SliceArg::from(..).step(2)).to_vec(), vec![0, 2, 4]);
    /// assert_eq!(a.slice(SliceArg::from(..).step(-1)).to_vec(), vec![5, 4, 3, 2, 1, 0]);
    /// ```
    #[track_caller]
    pub fn slice(&self, range: impl Into<crate::tensor::SliceArg>) -> Array<T> {
        ok(self.try_slice(range))
    }
    /// As [`Array::slice`], returning an error naming the position and the length.
    pub fn try_slice(&self, range: impl Into<crate::tensor::SliceArg>) -> Result<Array<T>> {
        let n = self.size().get();
        let t = crate::Tensor::try_from_array(self.clone(), &[n])?;
        Ok(t.try_slice(&[range.into()])?.into_array())
    }
    /// The arrays one after another, like `np.concatenate` (a lazy view of the parts).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let a = Float32::from_slice(&[1.0, 2.0]);
    /// let b = Float32::arange(3) * 10.0;
    /// assert_eq!(Float32::concat(&[a, b]).to_vec(), vec![1.0, 2.0, 0.0, 10.0, 20.0]);
    /// ```
    #[track_caller]
    pub fn concat(parts: &[Array<T>]) -> Array<T> {
        ok(Self::try_concat(parts))
    }
    /// As [`Array::concat`], returning an error (no parts, or a joined length beyond memory).
    pub fn try_concat(parts: &[Array<T>]) -> Result<Array<T>> {
        let tensors = parts
            .iter()
            .map(|p| crate::Tensor::try_from_array(p.clone(), &[p.size().get()]))
            .collect::<Result<Vec<_>>>()?;
        Ok(crate::Tensor::try_concat(&tensors, 0)?.into_array())
    }
}

impl<T: Numeric> Array<T> {
    /// `n` zeros.
    ///
    /// ```
    /// assert_eq!(kiln::Int64::zeros(2).to_vec(), vec![0, 0]);
    /// ```
    ///
    /// Sizes may be any integer type or a [`Size`]:
    ///
    /// ```
    /// assert_eq!(kiln::Float32::zeros(3u32).len(), 3);
    /// ```
    #[track_caller]
    pub fn zeros(n: impl IntoSize) -> Self {
        Self::full(T::zero(), n)
    }
    /// `n` ones.
    ///
    /// ```
    /// assert_eq!(kiln::Float32::ones(2).to_vec(), vec![1.0, 1.0]);
    /// ```
    #[track_caller]
    pub fn ones(n: impl IntoSize) -> Self {
        Self::full(T::one(), n)
    }
    /// `0, 1, …, n − 1`.
    ///
    /// ```
    /// assert_eq!(kiln::UInt64::arange(3).to_vec(), vec![0, 1, 2]);
    /// ```
    ///
    /// `n` may be a [`Size`] (`x.size()`), which inside a frozen function follows the inputs.
    #[track_caller]
    pub fn arange(n: impl IntoSize) -> Self {
        let n = n.into_size();
        let idx_ty = if !n.fits_u32() {
            VarType::U64
        } else {
            VarType::U32
        };
        let c = ok(core::counter(idx_ty, n));
        let r = ok(core::convert(Op::Cast, c, T::TYPE));
        core::dec_ref(c);
        Self::wrap(r)
    }
}

impl<T: Float> Array<T> {
    /// `n` evenly spaced values from `start` to `stop` inclusive (NumPy's `linspace`).
    ///
    /// ```
    /// assert_eq!(kiln::Float32::linspace(0.0, 1.0, 3).to_vec(), vec![0.0, 0.5, 1.0]);
    /// ```
    ///
    /// With a [`Size`] `n` inside a frozen function, the step is computed from `n`'s value, so the
    /// recording is tied to the input sizes (it records anew for others).
    #[track_caller]
    pub fn linspace(start: T, stop: T, n: impl IntoSize) -> Self {
        let n = n.into_size();
        // the step is computed on the host from n's value: a constant of a frozen recording
        let count = n.get();
        let step = if count > 1 {
            (stop.to_f64() - start.to_f64()) / (count - 1) as f64
        } else {
            0.0
        };
        let i = Self::arange(n);
        i * T::from_f64(step) + start
    }
}

impl<T: Scalar> From<T> for Array<T> {
    fn from(v: T) -> Self {
        Self::scalar(v)
    }
}

/// `{x}` prints the values like a rank-1 [`Tensor`](crate::Tensor) (NumPy/ndarray style: `[1, 2.5,
/// 3]`, elements in their `Display` form; in arrays of more than 500 elements only the first and
/// last 5, around `...`). Display **evaluates** the array (as `to_vec` does); an error prints as
/// `<error: …>`.
///
/// ```
/// let x = kiln::Float32::arange(4) * 0.5;
/// assert_eq!(format!("{x}"), "[0, 0.5, 1, 1.5]");
/// let long = kiln::Int32::arange(1000);
/// assert_eq!(format!("{long}"), "[0, 1, 2, 3, 4, ..., 995, 996, 997, 998, 999]");
/// ```
impl<T: Scalar> fmt::Display for Array<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.try_to_vec() {
            Ok(v) => crate::tensor::write_flat(f, &v),
            Err(e) => write!(f, "<error: {e}>"),
        }
    }
}

/// `{x:?}` describes the handle without evaluating anything: element type, size, label, and
/// whether it is evaluated, a literal or lazy; the values (printed as by `Display`) only where they
/// are known without running a kernel (an evaluated array outside a frozen recording or a traced
/// body, or a literal).
///
/// ```
/// let x = (kiln::Float32::arange(3) + 1.0).label("x");
/// assert_eq!(format!("{x:?}"), r#"Array<f32>[3] "x" lazy"#);
/// x.eval();
/// assert_eq!(format!("{x:?}"), r#"Array<f32>[3] "x" evaluated [1, 2, 3]"#);
/// assert_eq!(format!("{:?}", kiln::Int32::full(7, 2)), "Array<i32>[2] literal [7, 7]");
/// ```
impl<T: Scalar> fmt::Debug for Array<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = core::size(self.h.id());
        write!(f, "Array<{}>[{n}]", T::TYPE)?;
        if let Some(l) = core::label(self.h.id()) {
            write!(f, " {l:?}")?;
        }
        if let Some(bits) = core::literal_value(self.h.id()) {
            f.write_str(" literal ")?;
            // a literal's values are known without evaluating (Display would fill a buffer)
            let v = T::from_bits64(bits);
            if n > 500 {
                return write!(f, "[{v}, ... ({n} times)]");
            }
            return crate::tensor::write_flat(f, &vec![v; n]);
        }
        if !self.is_evaluated() {
            return f.write_str(" lazy");
        }
        f.write_str(" evaluated")?;
        // reading an evaluated buffer runs no kernel; inside a frozen recording or a traced body
        // a read is refused (and would be noted), so the values are left out there
        if core::freeze::in_recording() || core::control::symbolic() {
            return Ok(());
        }
        match self.try_to_vec() {
            Ok(v) => {
                f.write_str(" ")?;
                crate::tensor::write_flat(f, &v)
            }
            Err(_) => Ok(()),
        }
    }
}

/// Anything usable where an array operand is expected: an array (moved or borrowed) or a scalar
/// (a size-1 literal, broadcast).
pub trait IntoArray<T: Scalar> {
    fn into_array(self) -> Array<T>;
}
impl<T: Scalar> IntoArray<T> for Array<T> {
    fn into_array(self) -> Array<T> {
        self
    }
}
impl<T: Scalar> IntoArray<T> for &Array<T> {
    fn into_array(self) -> Array<T> {
        self.clone()
    }
}
impl<T: Scalar> IntoArray<T> for T {
    fn into_array(self) -> Array<T> {
        Array::scalar(self)
    }
}

/// A number of elements: a [`Size`] or any integer type (what `zeros`, `ones`, `full`, `arange`
/// and `linspace` take). A negative integer panics, naming it; an integer beyond `usize` too.
///
/// ```
/// use kiln::prelude::*;
/// assert_eq!(Float32::zeros(4u32).len(), 4);
/// assert_eq!(Int32::arange(3i64).to_vec(), vec![0, 1, 2]);
/// assert_eq!(UInt32::ones(2usize).to_vec(), vec![1, 1]);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a number of elements",
    label = "give an integer (any integer type) or a `kiln::Size` such as `x.size()`"
)]
pub trait IntoSize {
    /// The size (panics, naming the value, if it is negative or beyond `usize`).
    fn into_size(self) -> Size;
}
impl IntoSize for Size {
    fn into_size(self) -> Size {
        self
    }
}
impl IntoSize for &Size {
    fn into_size(self) -> Size {
        *self
    }
}
macro_rules! int_size {
    ($($t:ty),*) => {$(
        impl IntoSize for $t {
            #[track_caller]
            fn into_size(self) -> Size {
                match usize::try_from(self) {
                    Ok(n) => Size::from(n),
                    Err(_) => panic!(
                        "kiln: {} ({}) is not a number of elements; give a size from 0 to usize::MAX",
                        self,
                        stringify!($t)
                    ),
                }
            }
        }
    )*};
}
int_size!(usize, u8, u16, u32, u64, u128, isize, i8, i16, i32, i64, i128);
