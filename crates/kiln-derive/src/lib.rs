//! `#[derive(Traverse)]` for kiln.
//!
//! This crate owns only the derive: it turns a struct or enum definition into an implementation of
//! `kiln::Traverse` that visits every field in declaration order. The trait, the `Traversal` and
//! `Assign` types and all the meaning of a traversal (layout keys, array slots) live in `kiln`
//! (`kiln::freeze`); the generated code names them by absolute paths (`::kiln::...`), which also
//! works inside kiln itself thanks to its `extern crate self as kiln;`.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{parse_macro_input, parse_quote, Data, DeriveInput, Field, Fields, Ident, Index, LitStr};

/// Derive `kiln::Traverse` for a struct or an enum.
///
/// `traverse` first describes the value (`t.structure("Name", n)`, or `"Enum::Variant"` for an
/// enum variant, with `n` the number of visited fields), then visits each field in declaration
/// order: named fields by name (`t.field`), tuple fields by position (`t.index`). `traverse_mut`
/// visits the same fields in the same order.
///
/// A field marked `#[traverse(skip)]` is left out of both methods: it is not part of the frozen
/// state and does not affect the layout key. Every type parameter gets a `Traverse` bound;
/// lifetimes and const parameters pass through unchanged. Unions are rejected.
///
/// (Not run here: a proc-macro crate cannot depend on `kiln`, which the example needs; the same
/// derives are compiled and exercised by kiln's own tests, e.g. `tests/ad_freeze.rs`.)
///
/// ```ignore
/// use kiln::prelude::*;
/// use kiln::Traverse;
///
/// #[derive(Traverse)]
/// struct Scene<T> {
///     weights: Float32,
///     params: Vec<T>,
///     spp: u32,        // a plain value: part of the layout key
///     #[traverse(skip)]
///     name: String,    // not part of the frozen state
/// }
///
/// #[derive(Traverse)]
/// enum Light {
///     Off,
///     Point(Vector3f),
///     Area { radiance: Float32, two_sided: bool },
/// }
/// ```
#[proc_macro_derive(Traverse, attributes(traverse))]
pub fn derive_traverse(input: proc_macro::TokenStream) -> proc_macro::TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand(input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

fn expand(input: DeriveInput) -> syn::Result<TokenStream> {
    reject_attrs(&input.attrs, "a struct or enum")?;
    let name = &input.ident;
    let bodies = match &input.data {
        Data::Struct(data) => struct_bodies(name, &data.fields)?,
        Data::Enum(data) => {
            let mut errors: Option<syn::Error> = None;
            let mut arms = Vec::new();
            let mut arms_mut = Vec::new();
            let mut visited = 0;
            for variant in &data.variants {
                if let Err(e) = reject_attrs(&variant.attrs, "an enum variant") {
                    combine(&mut errors, e);
                }
                let label = format!("{}::{}", name.unraw(), variant.ident.unraw());
                match variant_arms(&variant.ident, &label, &variant.fields) {
                    Ok(arm) => {
                        arms.push(arm.traverse);
                        arms_mut.push(arm.traverse_mut);
                        visited += arm.visited;
                    }
                    Err(e) => combine(&mut errors, e),
                }
            }
            if let Some(e) = errors {
                return Err(e);
            }
            // `*self` so that an enum without variants still matches exhaustively.
            Bodies {
                traverse: quote!(match *self { #(#arms)* }),
                traverse_mut: quote!(match *self { #(#arms_mut)* }),
                visited,
            }
        }
        Data::Union(data) => {
            return Err(syn::Error::new(
                data.union_token.span,
                "#[derive(Traverse)] does not support unions: which field is active is unknown, \
                 so a union cannot be traversed",
            ));
        }
    };

    let mut generics = input.generics;
    let params: Vec<Ident> = generics.type_params().map(|p| p.ident.clone()).collect();
    let where_clause = generics.make_where_clause();
    for p in params {
        where_clause
            .predicates
            .push(parse_quote!(#p: ::kiln::Traverse));
    }
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    // With no field to visit, `traverse_mut` ignores its `Assign` (and must not warn about it).
    let assign = if bodies.visited > 0 {
        quote!(a)
    } else {
        quote!(_)
    };
    let Bodies {
        traverse,
        traverse_mut,
        ..
    } = bodies;

    Ok(quote! {
        #[automatically_derived]
        impl #impl_generics ::kiln::Traverse for #name #ty_generics #where_clause {
            fn traverse(&self, t: &mut ::kiln::freeze::Traversal) {
                #traverse
            }
            fn traverse_mut(&mut self, #assign: &mut ::kiln::freeze::Assign) {
                #traverse_mut
            }
        }
    })
}

/// Generated code for a struct (the method bodies) or for one enum variant (its match arms).
struct Bodies {
    traverse: TokenStream,
    traverse_mut: TokenStream,
    /// Number of fields visited (not skipped).
    visited: usize,
}

/// The bodies of `traverse` and `traverse_mut` for a struct (fields reached through `self`).
fn struct_bodies(name: &Ident, fields: &Fields) -> syn::Result<Bodies> {
    let label = LitStr::new(&name.unraw().to_string(), name.span());
    let visited = visited_fields(fields)?;
    let n = visited.len();
    let mut visits = Vec::new();
    let mut visits_mut = Vec::new();
    for (i, field) in visited {
        let member = match &field.ident {
            Some(ident) => quote!(#ident),
            None => {
                let index = Index::from(i);
                quote!(#index)
            }
        };
        visits.push(visit(field, i, quote!(&self.#member)));
        visits_mut.push(visit_mut(field, quote!(&mut self.#member)));
    }
    Ok(Bodies {
        traverse: quote! {
            t.structure(#label, #n);
            #(#visits)*
        },
        traverse_mut: quote!(#(#visits_mut)*),
        visited: n,
    })
}

/// The match arms of `traverse` and `traverse_mut` for one enum variant (fields bound by
/// reference in the pattern).
fn variant_arms(variant: &Ident, label: &str, fields: &Fields) -> syn::Result<Bodies> {
    let label = LitStr::new(label, variant.span());
    let visited = visited_fields(fields)?;
    let n = visited.len();
    let binding = |i: usize| format_ident!("__kiln_field_{}", i);

    // The pattern binds visited fields and ignores skipped ones; `ref` / `ref mut` because the
    // match is on `*self`.
    let pattern = |by: TokenStream| -> TokenStream {
        match fields {
            Fields::Unit => quote!(Self::#variant),
            Fields::Named(_) => {
                let binds = visited.iter().map(|(i, f)| {
                    let ident = &f.ident;
                    let b = binding(*i);
                    quote!(#ident: #by #b)
                });
                quote!(Self::#variant { #(#binds,)* .. })
            }
            Fields::Unnamed(unnamed) => {
                let binds = (0..unnamed.unnamed.len()).map(|i| {
                    if visited.iter().any(|(j, _)| *j == i) {
                        let b = binding(i);
                        quote!(#by #b)
                    } else {
                        quote!(_)
                    }
                });
                quote!(Self::#variant(#(#binds),*))
            }
        }
    };
    let pat = pattern(quote!(ref));
    let pat_mut = pattern(quote!(ref mut));

    let visits = visited.iter().map(|(i, f)| {
        let b = binding(*i);
        visit(f, *i, quote!(#b))
    });
    let visits_mut = visited
        .iter()
        .map(|(i, f)| visit_mut(f, binding(*i).into_token_stream()));
    Ok(Bodies {
        traverse: quote! {
            #pat => {
                t.structure(#label, #n);
                #(#visits)*
            }
        },
        traverse_mut: quote! {
            #pat_mut => { #(#visits_mut)* }
        },
        visited: n,
    })
}

/// One field visit in `traverse`: by name for named fields, by position for tuple fields.
/// `value` is an expression of type `&FieldType`. The call carries the field type's span, so a
/// field whose type is not `Traverse` is reported at that type.
fn visit(field: &Field, position: usize, value: TokenStream) -> TokenStream {
    let ty = &field.ty;
    let call = quote_spanned!(ty.span()=> <#ty as ::kiln::Traverse>::traverse(#value, t));
    match &field.ident {
        Some(ident) => {
            let name = LitStr::new(&ident.unraw().to_string(), ident.span());
            quote!(t.field(#name, |t| #call);)
        }
        None => quote!(t.index(#position, |t| #call);),
    }
}

/// One field visit in `traverse_mut`; `place` is an expression of type `&mut FieldType`.
fn visit_mut(field: &Field, place: TokenStream) -> TokenStream {
    let ty = &field.ty;
    quote_spanned!(ty.span()=> <#ty as ::kiln::Traverse>::traverse_mut(#place, a);)
}

/// The fields that are not `#[traverse(skip)]`, with their positions in the declaration.
fn visited_fields(fields: &Fields) -> syn::Result<Vec<(usize, &Field)>> {
    let mut errors = None;
    let mut visited = Vec::new();
    for (i, field) in fields.iter().enumerate() {
        match is_skipped(field) {
            Ok(true) => {}
            Ok(false) => visited.push((i, field)),
            Err(e) => combine(&mut errors, e),
        }
    }
    match errors {
        Some(e) => Err(e),
        None => Ok(visited),
    }
}

/// Whether a field carries `#[traverse(skip)]`; anything else inside `#[traverse(...)]` is an
/// error.
fn is_skipped(field: &Field) -> syn::Result<bool> {
    let mut skip = false;
    for attr in field.attrs.iter().filter(|a| a.path().is_ident("traverse")) {
        let list = attr.meta.require_list().map_err(|_| {
            syn::Error::new_spanned(
                attr,
                "expected `#[traverse(skip)]`: the only field option is `skip`",
            )
        })?;
        list.parse_nested_meta(|meta| {
            let takes_value = meta.input.peek(syn::Token![=]) || meta.input.peek(syn::token::Paren);
            if meta.path.is_ident("skip") && !takes_value {
                skip = true;
                Ok(())
            } else if meta.path.is_ident("skip") {
                Err(meta.error("`skip` takes no value: write `#[traverse(skip)]`"))
            } else {
                Err(syn::Error::new_spanned(
                    &meta.path,
                    "unknown `#[traverse(...)]` option: the only field option is `skip`",
                ))
            }
        })?;
    }
    Ok(skip)
}

/// `#[traverse(...)]` is a field attribute; reject it anywhere else instead of ignoring it.
fn reject_attrs(attrs: &[syn::Attribute], place: &str) -> syn::Result<()> {
    match attrs.iter().find(|a| a.path().is_ident("traverse")) {
        Some(attr) => Err(syn::Error::new_spanned(
            attr,
            format!("`#[traverse(...)]` applies to fields, not to {place}"),
        )),
        None => Ok(()),
    }
}

/// Collect several errors so that all of them are reported at once.
fn combine(acc: &mut Option<syn::Error>, e: syn::Error) {
    match acc {
        Some(acc) => acc.combine(e),
        None => *acc = Some(e),
    }
}
