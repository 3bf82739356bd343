//! `#[derive(Traverse)]` from a user's point of view: which fields a traversal visits, what enters
//! the layout key, and that generics, enums and nested containers work.
//!
//! `traverse_mut` needs an `Assign`, which only a replay can make, so it is exercised by the
//! freezing tests; here it is only checked to exist and to compile without warnings.

#![deny(unused_variables, unused_mut)]
#![allow(dead_code)] // skipped fields are never read

use kiln::freeze::Traversal;
use kiln::prelude::*;
use kiln::Traverse;

/// Traverse `value` into a fresh traversal: (layout key, number of array positions).
fn layout<T: Traverse>(value: &T) -> (u64, usize) {
    let mut t = Traversal::new();
    value.traverse(&mut t);
    (t.key(), t.len())
}

fn key<T: Traverse>(value: &T) -> u64 {
    layout(value).0
}

/// Compiles only if `T: Traverse`, i.e. both methods were generated.
fn assert_traverse<T: Traverse>() {}

#[derive(Traverse)]
struct Scene {
    weights: Float32,
    spp: u32,
    #[traverse(skip)]
    name: String,
}

fn scene(spp: u32, name: &str) -> Scene {
    Scene {
        weights: Float32::ones(4),
        spp,
        name: name.into(),
    }
}

#[test]
fn named_struct_counts_arrays_and_keys_scalars_not_skipped_fields() {
    let (k, n) = layout(&scene(2, "a"));
    assert_eq!(n, 1, "one array field");
    assert_eq!(
        k,
        key(&scene(2, "b")),
        "a skipped field is not part of the key"
    );
    assert_ne!(k, key(&scene(3, "a")), "a plain scalar is part of the key");
}

#[test]
fn named_struct_key_follows_field_values_not_identity() {
    // Equal layouts from different arrays of the same class share a key.
    assert_eq!(key(&scene(2, "a")), key(&scene(2, "a")));
}

#[derive(Traverse)]
struct Weights(Float32, Float32, #[traverse(skip)] u32);

#[test]
fn tuple_struct_visits_positions() {
    let w = |tag| Weights(Float32::ones(4), Float32::from_slice(&[1.0, 2.0]), tag);
    let (k, n) = layout(&w(0));
    assert_eq!(n, 2);
    assert_eq!(k, key(&w(7)), "the skipped position is not part of the key");
    // The struct's name is part of the layout: a plain tuple with the same contents differs.
    let plain = (Float32::ones(4), Float32::from_slice(&[1.0, 2.0]));
    assert_ne!(k, key(&plain));
}

#[derive(Traverse)]
struct Unit;

#[test]
fn unit_struct_has_no_arrays() {
    let (k, n) = layout(&Unit);
    assert_eq!(n, 0);
    assert_eq!(k, key(&Unit));
    assert_ne!(k, key(&()), "the struct's name is part of the key");
}

#[derive(Traverse)]
struct Pair<T> {
    a: T,
    b: T,
}

#[test]
fn generic_struct_bounds_its_parameter() {
    let arrays = Pair {
        a: Float32::ones(4),
        b: Float32::ones(4),
    };
    assert_eq!(layout(&arrays).1, 2);

    let nested = Pair {
        a: Pair {
            a: Float32::ones(2),
            b: Float32::ones(2),
        },
        b: Pair {
            a: Float32::ones(2),
            b: Float32::ones(2),
        },
    };
    assert_eq!(layout(&nested).1, 4);

    let scalars = |b| Pair { a: 1u32, b };
    assert_eq!(layout(&scalars(2)).1, 0);
    assert_ne!(key(&scalars(2)), key(&scalars(3)));

    // The same array in both fields is one slot, and the key says so.
    let x = Float32::from_slice(&[1.0, 2.0]);
    let shared = Pair { a: x.clone(), b: x };
    let distinct = Pair {
        a: Float32::from_slice(&[1.0, 2.0]),
        b: Float32::from_slice(&[1.0, 2.0]),
    };
    assert_eq!(layout(&shared).1, 2, "positions count duplicates");
    assert_ne!(key(&shared), key(&distinct));
}

/// Lifetimes and const parameters pass through; only type parameters get a bound.
#[derive(Traverse)]
struct Window<'a, T, const N: usize> {
    taps: [T; N],
    #[traverse(skip)]
    label: &'a str,
}

#[test]
fn lifetimes_and_const_generics_pass_through() {
    let w = Window {
        taps: [Float32::ones(3), Float32::ones(3)],
        label: "w",
    };
    assert_eq!(layout(&w).1, 2);
    assert_traverse::<Window<'static, u8, 4>>();
}

#[derive(Traverse)]
enum Shape {
    Empty,
    Circle(Float32, f32),
    Rect {
        min: Float32,
        max: Float32,
        #[traverse(skip)]
        tag: u8,
    },
}

#[test]
fn enum_variants_have_distinct_keys() {
    let empty = Shape::Empty;
    let circle = |r| Shape::Circle(Float32::ones(4), r);
    let rect = |tag| Shape::Rect {
        min: Float32::ones(4),
        max: Float32::ones(4),
        tag,
    };

    assert_eq!(layout(&empty).1, 0);
    assert_eq!(layout(&circle(1.0)).1, 1);
    assert_eq!(layout(&rect(0)).1, 2);

    let keys = [key(&empty), key(&circle(1.0)), key(&rect(0))];
    assert_ne!(keys[0], keys[1]);
    assert_ne!(keys[0], keys[2]);
    assert_ne!(keys[1], keys[2]);

    assert_ne!(
        key(&circle(1.0)),
        key(&circle(2.0)),
        "a scalar in a variant is keyed"
    );
    assert_eq!(
        key(&rect(0)),
        key(&rect(9)),
        "a skipped field in a variant is not"
    );
}

/// An enum whose variants carry no arrays: `traverse_mut` has nothing to do (and must not warn).
#[derive(Traverse)]
enum Mode {
    Fast,
    Exact,
}

/// A generic enum, and a variant whose only field is skipped.
#[derive(Traverse)]
enum Maybe<T> {
    Nothing(#[traverse(skip)] String),
    Just(T),
}

#[test]
fn enums_without_arrays_and_generic_enums() {
    assert_ne!(key(&Mode::Fast), key(&Mode::Exact));
    assert_traverse::<Mode>();

    let nothing = |s: &str| Maybe::<Float32>::Nothing(s.into());
    assert_eq!(key(&nothing("a")), key(&nothing("b")));
    assert_eq!(layout(&Maybe::Just(Float32::ones(2))).1, 1);
    assert_ne!(key(&nothing("a")), key(&Maybe::Just(Float32::ones(2))));
}

#[derive(Traverse)]
struct Batch {
    items: Vec<Option<Float32>>,
    scale: Option<Float32>,
}

#[test]
fn nested_containers_are_traversed_through() {
    let a = Batch {
        items: vec![Some(Float32::ones(4)), None, Some(Float32::ones(4))],
        scale: None,
    };
    let b = Batch {
        items: vec![None, Some(Float32::ones(4)), Some(Float32::ones(4))],
        scale: None,
    };
    let c = Batch {
        items: vec![Some(Float32::ones(4)), None, Some(Float32::ones(4))],
        scale: Some(Float32::ones(1)),
    };
    assert_eq!(layout(&a).1, 2, "only present arrays count");
    assert_eq!(layout(&b).1, 2);
    assert_eq!(layout(&c).1, 3);
    assert_ne!(
        key(&a),
        key(&b),
        "where the `None` sits is part of the layout"
    );
    assert_ne!(key(&a), key(&c));
}

/// Derived types compose: a struct of derived types and std containers of them.
#[derive(Traverse)]
struct World {
    scenes: Vec<Scene>,
    shapes: [Shape; 2],
    pair: Pair<Weights>,
    mode: Mode,
}

#[test]
fn derived_types_nest() {
    let world = World {
        scenes: vec![scene(1, "x"), scene(2, "y")],
        shapes: [Shape::Empty, Shape::Circle(Float32::ones(4), 0.5)],
        pair: Pair {
            a: Weights(Float32::ones(2), Float32::ones(2), 0),
            b: Weights(Float32::ones(2), Float32::ones(2), 1),
        },
        mode: Mode::Exact,
    };
    // 2 scenes × 1 + 1 circle + 2 × 2 weights
    assert_eq!(layout(&world).1, 7);
    assert_traverse::<World>();
}
