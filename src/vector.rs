//! `Vector<A, N>`: a small fixed-size vector whose components are arrays (structure of arrays).
//!
//! `Vector3f` is three `Float32` arrays — lane `i` of the three components is the `i`-th 3D vector —
//! so vector arithmetic traces ordinary array ops and fuses into the same kernel as everything else.
//! Componentwise `+ - * /` work between vectors (owned or borrowed), and with a per-lane scalar
//! array (`&Float32`) or a plain scalar (`2.0`) on either side; `dot`, `norm`, `normalize` and
//! `cross` are lanewise (one result per lane, no reduction across lanes).
//!
//! ```
//! use kiln::prelude::*;
//! let p = Vector3f::new(Float32::arange(4), 1.0, 0.0);
//! let q = (&p * 2.0 + 1.0).normalize();
//! let len = q.norm();
//! assert!(len.to_vec().iter().all(|l| (l - 1.0).abs() < 1e-6));
//! ```

use crate::array::{Array, Bool, IntoArray};
use crate::types::{Float, Numeric, Signed};
use kiln_core::Scalar;
use std::ops::{
    Add, AddAssign, Div, DivAssign, Index, IndexMut, Mul, MulAssign, Neg, Sub, SubAssign,
};

/// A fixed-size vector of `N` components of type `A` (usually arrays: see [`Vector3f`] and friends).
///
/// The components are the public field `.0`; [`Vector::x`]/`y`/`z`/`w` and indexing read them.
///
/// ```
/// use kiln::prelude::*;
/// let v = Vector2i::new(Int32::arange(3), Int32::from(10));
/// let w = &v + &v;
/// assert_eq!(w.x().to_vec(), vec![0, 2, 4]);
/// assert_eq!(w[1].to_vec(), vec![20]);
/// ```
#[derive(Clone, Debug)]
pub struct Vector<A, const N: usize>(pub [A; N]);

/// Two `Float32` components.
///
/// ```
/// use kiln::prelude::*;
/// let v = Vector2f::new(3.0, 4.0);
/// assert_eq!(v.norm().item(), 5.0);
/// ```
pub type Vector2f = Vector<Array<f32>, 2>;
/// Three `Float32` components.
///
/// ```
/// use kiln::prelude::*;
/// let v = Vector3f::new(1.0, 2.0, 2.0);
/// assert_eq!(v.norm().item(), 3.0);
/// ```
pub type Vector3f = Vector<Array<f32>, 3>;
/// Four `Float32` components.
///
/// ```
/// use kiln::prelude::*;
/// let v = Vector4f::splat(Float32::from(0.5));
/// assert_eq!(v.squared_norm().item(), 1.0);
/// ```
pub type Vector4f = Vector<Array<f32>, 4>;
/// Two `Float64` components.
///
/// ```
/// use kiln::prelude::*;
/// let v = Vector2d::new(Float64::from(1.0), Float64::from(1.0));
/// assert!((v.norm().item() - 2f64.sqrt()).abs() < 1e-15);
/// ```
pub type Vector2d = Vector<Array<f64>, 2>;
/// Three `Float64` components.
///
/// ```
/// use kiln::prelude::*;
/// let v = Vector3d::new(0.0, 0.0, -2.0);
/// assert_eq!(v.normalize().z().item(), -1.0);
/// ```
pub type Vector3d = Vector<Array<f64>, 3>;
/// Four `Float64` components.
///
/// ```
/// use kiln::prelude::*;
/// let v = Vector4d::new(1.0, 1.0, 1.0, 1.0);
/// assert_eq!(v.norm().item(), 2.0);
/// ```
pub type Vector4d = Vector<Array<f64>, 4>;
/// Two `Int32` components.
///
/// ```
/// use kiln::prelude::*;
/// let v = Vector2i::new(2, 3);
/// assert_eq!(v.dot(&v).item(), 13);
/// ```
pub type Vector2i = Vector<Array<i32>, 2>;
/// Three `Int32` components.
///
/// ```
/// use kiln::prelude::*;
/// let c = Vector3i::new(1, 0, 0).cross(&Vector3i::new(0, 1, 0));
/// assert_eq!(c.z().item(), 1);
/// ```
pub type Vector3i = Vector<Array<i32>, 3>;
/// Four `Int32` components.
///
/// ```
/// use kiln::prelude::*;
/// let v = Vector4i::from_fn(|i| Int32::from(i as i32));
/// assert_eq!(v.w().item(), 3);
/// ```
pub type Vector4i = Vector<Array<i32>, 4>;

impl<A, const N: usize> Vector<A, N> {
    /// A vector from an array of components (same as `Vector(components)` or `components.into()`).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let v = Vector::from_array([Float32::from(1.0), Float32::from(2.0)]);
    /// assert_eq!(v.y().item(), 2.0);
    /// ```
    pub fn from_array(components: [A; N]) -> Self {
        Vector(components)
    }
    /// Component `i` is `f(i)`.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let v: Vector3f = Vector::from_fn(|i| Float32::full(i as f32, 2));
    /// assert_eq!(v.z().to_vec(), vec![2.0, 2.0]);
    /// ```
    pub fn from_fn(f: impl FnMut(usize) -> A) -> Self {
        Vector(std::array::from_fn(f))
    }
    /// `N` copies of `value` (arrays are handles: copying one is cheap and shares the variable).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let v = Vector3f::splat(Float32::from(1.5));
    /// assert_eq!(v.x().item() + v.y().item() + v.z().item(), 4.5);
    /// ```
    pub fn splat(value: A) -> Self
    where
        A: Clone,
    {
        Vector(std::array::from_fn(|_| value.clone()))
    }
    /// The components, borrowed.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let v = Vector2i::new(1, 2);
    /// assert_eq!(v.components().len(), 2);
    /// ```
    pub fn components(&self) -> &[A; N] {
        &self.0
    }
    /// The components, taken.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let [x, y] = Vector2i::new(1, 2).into_components();
    /// assert_eq!(x.item() + y.item(), 3);
    /// ```
    pub fn into_components(self) -> [A; N] {
        self.0
    }
    /// Number of components, `N` (not the number of lanes: see [`Vector::lanes`]).
    ///
    /// ```
    /// assert_eq!(kiln::Vector3f::splat(kiln::Float32::zeros(9)).len(), 3);
    /// ```
    #[allow(clippy::len_without_is_empty)]
    pub const fn len(&self) -> usize {
        N
    }
    /// Apply `f` to each component.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let v = Vector2f::new(-1.0, 2.0).map(|c| c.abs());
    /// assert_eq!(v.x().item(), 1.0);
    /// ```
    pub fn map<B>(self, f: impl FnMut(A) -> B) -> Vector<B, N> {
        Vector(self.0.map(f))
    }
    /// Iterate over the components.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let v = Vector3i::new(1, 2, 3);
    /// assert_eq!(v.iter().map(|c| c.item()).sum::<i32>(), 6);
    /// ```
    pub fn iter(&self) -> std::slice::Iter<'_, A> {
        self.0.iter()
    }
}

impl<A, const N: usize> From<[A; N]> for Vector<A, N> {
    fn from(components: [A; N]) -> Self {
        Vector(components)
    }
}

impl<A, const N: usize> Index<usize> for Vector<A, N> {
    type Output = A;
    fn index(&self, i: usize) -> &A {
        &self.0[i]
    }
}

impl<A, const N: usize> IndexMut<usize> for Vector<A, N> {
    fn index_mut(&mut self, i: usize) -> &mut A {
        &mut self.0[i]
    }
}

impl<'a, A, const N: usize> IntoIterator for &'a Vector<A, N> {
    type Item = &'a A;
    type IntoIter = std::slice::Iter<'a, A>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<A, const N: usize> IntoIterator for Vector<A, N> {
    type Item = A;
    type IntoIter = std::array::IntoIter<A, N>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<T: Scalar> Vector<Array<T>, 2> {
    /// A 2D vector from its components.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let v = Vector2f::new(Float32::arange(2), Float32::from(7.0));
    /// assert_eq!(v.y().item(), 7.0);
    /// ```
    pub fn new(x: impl IntoArray<T>, y: impl IntoArray<T>) -> Self {
        Vector([x.into_array(), y.into_array()])
    }
}

impl<T: Scalar> Vector<Array<T>, 3> {
    /// A 3D vector from its components: arrays (owned or borrowed) or plain scalars (size-1
    /// literals that broadcast), as every operand in kiln.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let v = Vector3f::new(1.0, 2.0, 3.0);
    /// assert_eq!(v.z().item(), 3.0);
    /// ```
    pub fn new(x: impl IntoArray<T>, y: impl IntoArray<T>, z: impl IntoArray<T>) -> Self {
        Vector([x.into_array(), y.into_array(), z.into_array()])
    }
}

impl<T: Scalar> Vector<Array<T>, 4> {
    /// A 4D vector from its components.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let v = Vector4i::new(1, 2, 3, 4);
    /// assert_eq!(v.w().item(), 4);
    /// ```
    pub fn new(
        x: impl IntoArray<T>,
        y: impl IntoArray<T>,
        z: impl IntoArray<T>,
        w: impl IntoArray<T>,
    ) -> Self {
        Vector([
            x.into_array(),
            y.into_array(),
            z.into_array(),
            w.into_array(),
        ])
    }
}

macro_rules! accessors {
    ($n:literal: $($name:ident $name_mut:ident $i:literal),*) => {
        impl<A> Vector<A, $n> {$(
            #[doc = concat!("Component ", stringify!($i), " (`", stringify!($name), "`).")]
            ///
            /// ```
            /// use kiln::prelude::*;
            /// let v = Vector4i::from_fn(|i| Int32::from(10 * i as i32));
            /// assert_eq!((v.x().item(), v.y().item(), v.z().item(), v.w().item()), (0, 10, 20, 30));
            /// ```
            pub fn $name(&self) -> &A {
                &self.0[$i]
            }
            #[doc = concat!("Component ", stringify!($i), ", mutably.")]
            ///
            /// ```
            /// use kiln::prelude::*;
            /// let mut v = Vector4f::splat(Float32::from(1.0));
            /// *v.x_mut() += 1.0;
            /// *v.w_mut() *= 3.0;
            /// assert_eq!((v.x().item(), v.w().item()), (2.0, 3.0));
            /// ```
            pub fn $name_mut(&mut self) -> &mut A {
                &mut self.0[$i]
            }
        )*}
    };
}
accessors!(2: x x_mut 0, y y_mut 1);
accessors!(3: x x_mut 0, y y_mut 1, z z_mut 2);
accessors!(4: x x_mut 0, y y_mut 1, z z_mut 2, w w_mut 3);

// ---------------------------------------------------------------------------------------------
// Componentwise vector ∘ vector, for any component type with the operator.

macro_rules! vector_op {
    ($Trait:ident, $method:ident, $Assign:ident, $assign:ident) => {
        impl<A, const N: usize> $Trait<&Vector<A, N>> for &Vector<A, N>
        where
            for<'x> &'x A: $Trait<&'x A, Output = A>,
        {
            type Output = Vector<A, N>;
            #[track_caller]
            fn $method(self, rhs: &Vector<A, N>) -> Vector<A, N> {
                Vector(std::array::from_fn(|i| {
                    $Trait::$method(&self.0[i], &rhs.0[i])
                }))
            }
        }
        impl<A, const N: usize> $Trait<Vector<A, N>> for &Vector<A, N>
        where
            for<'x> &'x A: $Trait<&'x A, Output = A>,
        {
            type Output = Vector<A, N>;
            #[track_caller]
            fn $method(self, rhs: Vector<A, N>) -> Vector<A, N> {
                $Trait::$method(self, &rhs)
            }
        }
        impl<A, const N: usize> $Trait<&Vector<A, N>> for Vector<A, N>
        where
            for<'x> &'x A: $Trait<&'x A, Output = A>,
        {
            type Output = Vector<A, N>;
            #[track_caller]
            fn $method(self, rhs: &Vector<A, N>) -> Vector<A, N> {
                $Trait::$method(&self, rhs)
            }
        }
        impl<A, const N: usize> $Trait<Vector<A, N>> for Vector<A, N>
        where
            for<'x> &'x A: $Trait<&'x A, Output = A>,
        {
            type Output = Vector<A, N>;
            #[track_caller]
            fn $method(self, rhs: Vector<A, N>) -> Vector<A, N> {
                $Trait::$method(&self, &rhs)
            }
        }
        impl<A, const N: usize> $Assign<&Vector<A, N>> for Vector<A, N>
        where
            for<'x> &'x A: $Trait<&'x A, Output = A>,
        {
            #[track_caller]
            fn $assign(&mut self, rhs: &Vector<A, N>) {
                for (a, b) in self.0.iter_mut().zip(&rhs.0) {
                    *a = $Trait::$method(&*a, b);
                }
            }
        }
        impl<A, const N: usize> $Assign<Vector<A, N>> for Vector<A, N>
        where
            for<'x> &'x A: $Trait<&'x A, Output = A>,
        {
            #[track_caller]
            fn $assign(&mut self, rhs: Vector<A, N>) {
                $Assign::$assign(self, &rhs)
            }
        }
    };
}
vector_op!(Add, add, AddAssign, add_assign);
vector_op!(Sub, sub, SubAssign, sub_assign);
vector_op!(Mul, mul, MulAssign, mul_assign);
vector_op!(Div, div, DivAssign, div_assign);

impl<A, const N: usize> Neg for &Vector<A, N>
where
    for<'x> &'x A: Neg<Output = A>,
{
    type Output = Vector<A, N>;
    fn neg(self) -> Vector<A, N> {
        Vector(std::array::from_fn(|i| -&self.0[i]))
    }
}
impl<A, const N: usize> Neg for Vector<A, N>
where
    for<'x> &'x A: Neg<Output = A>,
{
    type Output = Vector<A, N>;
    fn neg(self) -> Vector<A, N> {
        -&self
    }
}

// ---------------------------------------------------------------------------------------------
// Vector ∘ per-lane scalar (an array, borrowed or owned, or a plain scalar), both sides.

macro_rules! scalar_rhs_op {
    ($Trait:ident, $method:ident, $Assign:ident, $assign:ident) => {
        impl<T: Numeric, const N: usize> $Trait<&Array<T>> for &Vector<Array<T>, N> {
            type Output = Vector<Array<T>, N>;
            #[track_caller]
            fn $method(self, rhs: &Array<T>) -> Self::Output {
                Vector(std::array::from_fn(|i| $Trait::$method(&self.0[i], rhs)))
            }
        }
        impl<T: Numeric, const N: usize> $Trait<Array<T>> for &Vector<Array<T>, N> {
            type Output = Vector<Array<T>, N>;
            #[track_caller]
            fn $method(self, rhs: Array<T>) -> Self::Output {
                $Trait::$method(self, &rhs)
            }
        }
        impl<T: Numeric, const N: usize> $Trait<T> for &Vector<Array<T>, N> {
            type Output = Vector<Array<T>, N>;
            #[track_caller]
            fn $method(self, rhs: T) -> Self::Output {
                $Trait::$method(self, &Array::scalar(rhs))
            }
        }
        impl<T: Numeric, const N: usize> $Trait<&Array<T>> for Vector<Array<T>, N> {
            type Output = Vector<Array<T>, N>;
            #[track_caller]
            fn $method(self, rhs: &Array<T>) -> Self::Output {
                $Trait::$method(&self, rhs)
            }
        }
        impl<T: Numeric, const N: usize> $Trait<Array<T>> for Vector<Array<T>, N> {
            type Output = Vector<Array<T>, N>;
            #[track_caller]
            fn $method(self, rhs: Array<T>) -> Self::Output {
                $Trait::$method(&self, &rhs)
            }
        }
        impl<T: Numeric, const N: usize> $Trait<T> for Vector<Array<T>, N> {
            type Output = Vector<Array<T>, N>;
            #[track_caller]
            fn $method(self, rhs: T) -> Self::Output {
                $Trait::$method(&self, &Array::scalar(rhs))
            }
        }
        impl<T: Numeric, const N: usize> $Assign<&Array<T>> for Vector<Array<T>, N> {
            #[track_caller]
            fn $assign(&mut self, rhs: &Array<T>) {
                for a in self.0.iter_mut() {
                    *a = $Trait::$method(&*a, rhs);
                }
            }
        }
        impl<T: Numeric, const N: usize> $Assign<Array<T>> for Vector<Array<T>, N> {
            #[track_caller]
            fn $assign(&mut self, rhs: Array<T>) {
                $Assign::$assign(self, &rhs)
            }
        }
        impl<T: Numeric, const N: usize> $Assign<T> for Vector<Array<T>, N> {
            #[track_caller]
            fn $assign(&mut self, rhs: T) {
                $Assign::$assign(self, &Array::scalar(rhs))
            }
        }
        // per-lane scalar array on the left: `&s * &v`
        impl<T: Numeric, const N: usize> $Trait<&Vector<Array<T>, N>> for &Array<T> {
            type Output = Vector<Array<T>, N>;
            #[track_caller]
            fn $method(self, rhs: &Vector<Array<T>, N>) -> Self::Output {
                Vector(std::array::from_fn(|i| $Trait::$method(self, &rhs.0[i])))
            }
        }
        impl<T: Numeric, const N: usize> $Trait<Vector<Array<T>, N>> for &Array<T> {
            type Output = Vector<Array<T>, N>;
            #[track_caller]
            fn $method(self, rhs: Vector<Array<T>, N>) -> Self::Output {
                $Trait::$method(self, &rhs)
            }
        }
        impl<T: Numeric, const N: usize> $Trait<&Vector<Array<T>, N>> for Array<T> {
            type Output = Vector<Array<T>, N>;
            #[track_caller]
            fn $method(self, rhs: &Vector<Array<T>, N>) -> Self::Output {
                $Trait::$method(&self, rhs)
            }
        }
        impl<T: Numeric, const N: usize> $Trait<Vector<Array<T>, N>> for Array<T> {
            type Output = Vector<Array<T>, N>;
            #[track_caller]
            fn $method(self, rhs: Vector<Array<T>, N>) -> Self::Output {
                $Trait::$method(&self, &rhs)
            }
        }
    };
}
scalar_rhs_op!(Add, add, AddAssign, add_assign);
scalar_rhs_op!(Sub, sub, SubAssign, sub_assign);
scalar_rhs_op!(Mul, mul, MulAssign, mul_assign);
scalar_rhs_op!(Div, div, DivAssign, div_assign);

// plain scalar on the left: `2.0 * &v` (one impl per element type, as for arrays)
macro_rules! scalar_lhs_op {
    ($($t:ty),*) => {$(
        scalar_lhs_op!(@one $t, Add add);
        scalar_lhs_op!(@one $t, Sub sub);
        scalar_lhs_op!(@one $t, Mul mul);
        scalar_lhs_op!(@one $t, Div div);
    )*};
    (@one $t:ty, $Trait:ident $method:ident) => {
        impl<const N: usize> $Trait<&Vector<Array<$t>, N>> for $t {
            type Output = Vector<Array<$t>, N>;
            #[track_caller]
            fn $method(self, rhs: &Vector<Array<$t>, N>) -> Self::Output {
                $Trait::$method(&Array::scalar(self), rhs)
            }
        }
        impl<const N: usize> $Trait<Vector<Array<$t>, N>> for $t {
            type Output = Vector<Array<$t>, N>;
            #[track_caller]
            fn $method(self, rhs: Vector<Array<$t>, N>) -> Self::Output {
                $Trait::$method(&Array::scalar(self), &rhs)
            }
        }
    };
}
scalar_lhs_op!(f32, f64, i32, u32, i64, u64);

// ---------------------------------------------------------------------------------------------
// Geometry and array-specific helpers.

impl<T: Scalar, const N: usize> Vector<Array<T>, N> {
    /// Number of lanes (vectors): the largest component size (size-1 components broadcast).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let v = Vector2f::new(Float32::zeros(5), Float32::from(1.0));
    /// assert_eq!(v.lanes(), 5);
    /// ```
    pub fn lanes(&self) -> usize {
        self.0.iter().map(Array::len).max().unwrap_or(0)
    }
    /// Evaluate all components now, together (one kernel for components of equal size).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let v = Vector2f::new(Float32::arange(3), Float32::arange(3) * 2.0);
    /// v.eval();
    /// assert!(v.x().is_evaluated() && v.y().is_evaluated());
    /// ```
    #[track_caller]
    pub fn eval(&self) -> &Self {
        let ids: Vec<_> = self.0.iter().map(Array::id).collect();
        crate::array::ok(crate::eval_ids(&ids));
        self
    }
    /// Name the components `name.x`, `name.y`, `name.z`, `name.w` (beyond four: `name[4]`, …),
    /// as [`Array::label`] does for one array; returns the vector for chaining.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let p = Vector2f::new(Float32::zeros(3), Float32::ones(3)).label("p");
    /// assert_eq!(p.y().get_label().as_deref(), Some("p.y"));
    /// ```
    pub fn label(self, name: &str) -> Self {
        for (k, c) in self.0.iter().enumerate() {
            let l = match k {
                0..=3 => format!("{name}.{}", ["x", "y", "z", "w"][k]),
                _ => format!("{name}[{k}]"),
            };
            kiln_core::set_label(c.id(), &l);
        }
        self
    }
    /// Whether every component is evaluated.
    pub fn is_evaluated(&self) -> bool {
        self.0.iter().all(Array::is_evaluated)
    }
    /// Convert each component to `U` (Rust `as` semantics, see [`Array::cast`]).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let v = Vector2i::new(1, -2).cast::<f32>();
    /// assert_eq!(v.y().item(), -2.0);
    /// ```
    pub fn cast<U: Scalar>(&self) -> Vector<Array<U>, N> {
        Vector(std::array::from_fn(|i| self.0[i].cast::<U>()))
    }
    /// `mask ? a : b` lane by lane, for every component.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let a = Vector2i::splat(Int32::arange(3));
    /// let b = Vector2i::splat(Int32::from(-1));
    /// let c = Vector::select(&a.x().lt(1), &a, &b);
    /// assert_eq!(c.y().to_vec(), vec![0, -1, -1]);
    /// ```
    #[track_caller]
    pub fn select(mask: &Bool, a: &Self, b: &Self) -> Self {
        Vector(std::array::from_fn(|i| {
            crate::ops::select(mask, &a.0[i], &b.0[i])
        }))
    }
}

impl<T: Numeric, const N: usize> Vector<Array<T>, N> {
    /// Lanewise dot product `Σ self[i] * other[i]` (one value per lane; `Array::dot`, by contrast,
    /// reduces over lanes).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let a = Vector3f::new(1.0, 2.0, 3.0);
    /// let b = Vector3f::new(4.0, -5.0, 6.0);
    /// assert_eq!(a.dot(&b).item(), 12.0);
    /// ```
    #[track_caller]
    pub fn dot(&self, other: &Self) -> Array<T> {
        let mut acc = &self.0[0] * &other.0[0];
        for i in 1..N {
            acc = &acc + &(&self.0[i] * &other.0[i]);
        }
        acc
    }
    /// `self · self`, lanewise.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let v = Vector2i::new(3, -4);
    /// assert_eq!(v.squared_norm().item(), 25);
    /// ```
    #[track_caller]
    pub fn squared_norm(&self) -> Array<T> {
        self.dot(self)
    }
    /// Sum of the components, lanewise.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let v = Vector3i::new(1, 2, 3);
    /// assert_eq!(v.hsum().item(), 6);
    /// ```
    #[track_caller]
    pub fn hsum(&self) -> Array<T> {
        let mut acc = self.0[0].clone();
        for c in &self.0[1..] {
            acc = &acc + c;
        }
        acc
    }
    /// Componentwise minimum.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let v = Vector2i::new(1, 5).min(&Vector2i::splat(3.into()));
    /// assert_eq!((v.x().item(), v.y().item()), (1, 3));
    /// ```
    #[track_caller]
    pub fn min(&self, other: &Self) -> Self {
        Vector(std::array::from_fn(|i| self.0[i].min(&other.0[i])))
    }
    /// Componentwise maximum.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let v = Vector2i::new(1, 5).max(&Vector2i::splat(3.into()));
    /// assert_eq!((v.x().item(), v.y().item()), (3, 5));
    /// ```
    #[track_caller]
    pub fn max(&self, other: &Self) -> Self {
        Vector(std::array::from_fn(|i| self.0[i].max(&other.0[i])))
    }
}

impl<T: Signed, const N: usize> Vector<Array<T>, N> {
    /// Componentwise absolute value.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let v = Vector2f::new(-1.5, 2.0).abs();
    /// assert_eq!(v.x().item(), 1.5);
    /// ```
    pub fn abs(&self) -> Self {
        Vector(std::array::from_fn(|i| self.0[i].abs()))
    }
}

impl<T: Float, const N: usize> Vector<Array<T>, N> {
    /// Euclidean length, lanewise: `sqrt(self · self)`.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let v = Vector3f::new(Float32::from_slice(&[3.0, 0.0]), 4.0, 0.0);
    /// assert_eq!(v.norm().to_vec(), vec![5.0, 4.0]);
    /// ```
    #[track_caller]
    pub fn norm(&self) -> Array<T> {
        self.squared_norm().sqrt()
    }
    /// `self / norm(self)`, lanewise (a zero vector gives NaN components, as in Enoki/Dr.Jit).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let v = Vector2f::new(3.0, 4.0).normalize();
    /// assert_eq!((v.x().item(), v.y().item()), (0.6, 0.8));
    /// ```
    #[track_caller]
    pub fn normalize(&self) -> Self {
        let inv = self.norm().rcp();
        self * &inv
    }
}

impl<T: Numeric> Vector<Array<T>, 3> {
    /// Cross product `self × other`, lanewise.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let x = Vector3f::new(1.0, 0.0, 0.0);
    /// let y = Vector3f::new(0.0, 1.0, 0.0);
    /// let z = x.cross(&y);
    /// assert_eq!((z.x().item(), z.y().item(), z.z().item()), (0.0, 0.0, 1.0));
    /// ```
    #[track_caller]
    pub fn cross(&self, other: &Self) -> Self {
        let [ax, ay, az] = &self.0;
        let [bx, by, bz] = &other.0;
        Vector([
            &(ay * bz) - &(az * by),
            &(az * bx) - &(ax * bz),
            &(ax * by) - &(ay * bx),
        ])
    }
}

impl<T: Scalar, const N: usize> Vector<Array<T>, N> {
    /// `N` copies of `value` converted to an array (a scalar becomes a size-1 literal).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let v: Vector3f = Vector::broadcast(2.0f32);
    /// assert_eq!(v.squared_norm().item(), 12.0);
    /// ```
    pub fn broadcast(value: impl IntoArray<T>) -> Self {
        Self::splat(value.into_array())
    }
}
