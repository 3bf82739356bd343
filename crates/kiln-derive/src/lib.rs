//! `#[derive(Traverse)]` lands with the function-freezing issue; this crate reserves its place.
