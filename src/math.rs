//! Transcendental functions, built once from basic ops (polynomials) so every backend runs the same code.
