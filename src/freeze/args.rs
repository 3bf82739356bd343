//! Argument lists of frozen functions: closures of 1 to 8 arguments, each `&T` or `&mut T`.
//!
//! [`Signature`] is implemented for every closure shape (a marker type such as
//! `fn(Ref<Scene>, Mut<Float32>) -> Out` names it), so `freeze` infers it from the closure; each
//! shape gets a `call` method with the same parameters. [`ArgList`] lets the engine traverse the
//! arguments and hand results back into the `&mut` ones without knowing the shape.

use super::traverse::{Assign, Traversal, Traverse};
use std::marker::PhantomData;

/// Marker: the argument is passed as `&T`.
pub struct Ref<T>(PhantomData<fn() -> T>);
/// Marker: the argument is passed as `&mut T`.
pub struct Mut<T>(PhantomData<fn() -> T>);

/// A closure shape that `freeze` accepts; `M` is a marker like `fn(Ref<A>, Mut<B>) -> Out`.
pub trait Signature<M> {}

/// One argument as the engine sees it.
pub trait ArgItem {
    /// Whether the function may change it (`&mut`).
    const MUTABLE: bool;
    fn traverse_arg(&self, t: &mut Traversal);
    /// Hand results back (only `&mut` arguments take them).
    fn assign_arg(&mut self, a: &mut Assign);
}

impl<T: Traverse> ArgItem for &T {
    const MUTABLE: bool = false;
    fn traverse_arg(&self, t: &mut Traversal) {
        (**self).traverse(t)
    }
    fn assign_arg(&mut self, _: &mut Assign) {}
}
impl<T: Traverse> ArgItem for &mut T {
    const MUTABLE: bool = true;
    fn traverse_arg(&self, t: &mut Traversal) {
        (**self).traverse(t)
    }
    fn assign_arg(&mut self, a: &mut Assign) {
        (**self).traverse_mut(a)
    }
}

/// All arguments of one call.
pub trait ArgList {
    /// Whether every argument is `&mut` (then `traverse_mutable` finds what `traverse_all` does).
    const ALL_MUTABLE: bool;
    /// Traverse every argument (the inputs).
    fn traverse_all(&self, t: &mut Traversal);
    /// Traverse only the `&mut` arguments (their state after the call is an output).
    fn traverse_mutable(&self, t: &mut Traversal);
    /// Hand results back into the `&mut` arguments, in `traverse_mutable` order.
    fn assign_mutable(&mut self, a: &mut Assign);
}

const ARG_NAMES: [&str; 8] = [
    "arg0", "arg1", "arg2", "arg3", "arg4", "arg5", "arg6", "arg7",
];

macro_rules! arg_list {
    ($($T:ident $i:tt),+) => {
        impl<$($T: ArgItem),+> ArgList for ($($T,)+) {
            const ALL_MUTABLE: bool = $( $T::MUTABLE )&&+;
            fn traverse_all(&self, t: &mut Traversal) {
                $( t.argument(ARG_NAMES[$i], |t| self.$i.traverse_arg(t)); )+
            }
            fn traverse_mutable(&self, t: &mut Traversal) {
                $( if $T::MUTABLE { t.argument(ARG_NAMES[$i], |t| self.$i.traverse_arg(t)); } )+
            }
            fn assign_mutable(&mut self, a: &mut Assign) {
                $( if $T::MUTABLE { self.$i.assign_arg(a); } )+
            }
        }
    };
}
arg_list!(A 0);
arg_list!(A 0, B 1);
arg_list!(A 0, B 1, C 2);
arg_list!(A 0, B 1, C 2, D 3);
arg_list!(A 0, B 1, C 2, D 3, E 4);
arg_list!(A 0, B 1, C 2, D 3, E 4, F 5);
arg_list!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
arg_list!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);

/// `&T` or `&mut T` for a marker.
macro_rules! arg_ty {
    (Ref $T:ident) => {
        &$T
    };
    (Mut $T:ident) => {
        &mut $T
    };
}
/// Pass an argument held in the call's tuple on to the closure.
macro_rules! pass {
    (Ref $a:ident) => {
        *$a
    };
    (Mut $a:ident) => {
        &mut **$a
    };
}

/// A closure shape's shared view of its arguments (what `.with_state` receives).
pub trait Shape {
    /// The arguments as shared references, in order.
    type Args<'a>
    where
        Self: 'a;
}

/// One closure shape: the `Signature` and `Shape` impls and its `call` method.
macro_rules! shape {
    ($($kind:ident $T:ident $a:ident),+ $(,)?) => {
        impl<Func, Out, $($T: Traverse),+> Signature<fn($($kind<$T>),+) -> Out> for Func
        where
            Func: FnMut($(arg_ty!($kind $T)),+) -> Out,
        {
        }
        impl<Out, $($T),+> Shape for fn($($kind<$T>),+) -> Out {
            type Args<'x> = ($(&'x $T,)+) where Self: 'x;
        }
        impl<Func, Out, $($T: Traverse + 'static),+> super::Frozen<Func, fn($($kind<$T>),+) -> Out>
        where
            Func: FnMut($(arg_ty!($kind $T)),+) -> Out,
            Out: Traverse + Clone + Send + 'static,
        {
            /// Call the function: the first call with a new input layout records, later compatible
            /// calls replay (see [`crate::freeze::freeze`]).
            #[allow(clippy::too_many_arguments)]
            pub fn call(&mut self, $($a: arg_ty!($kind $T)),+) -> kiln_core::Result<Out> {
                let extra = match (&mut self.state_fn, self.state.wants_state()) {
                    (Some(sf), true) => Some(sf(($(&*$a,)+))),
                    _ => None,
                };
                let mut args = ($($a,)+);
                let f = &mut self.f;
                self.state.call(&mut args, extra, &mut |args: &mut ($(arg_ty!($kind $T),)+)| {
                    let ($($a,)+) = args;
                    f($(pass!($kind $a)),+)
                })
            }
        }
    };
}

/// Every `&`/`&mut` combination of an argument list.
macro_rules! shapes {
    (@go [$($done:tt)*]) => { shape!($($done)*); };
    (@go [$($done:tt)*] $T:ident $a:ident $($rest:ident)*) => {
        shapes!(@go [$($done)* Ref $T $a,] $($rest)*);
        shapes!(@go [$($done)* Mut $T $a,] $($rest)*);
    };
    ($($T:ident $a:ident)+) => { shapes!(@go [] $($T $a)+); };
}

shapes!(A a);
shapes!(A a B b);
shapes!(A a B b C c);
shapes!(A a B b C c D d);
shapes!(A a B b C c D d E e);
shapes!(A a B b C c D d E e F f);
shapes!(A a B b C c D d E e F f G g);
shapes!(A a B b C c D d E e F f G g H h);
