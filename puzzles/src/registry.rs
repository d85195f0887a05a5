//! The one list of search spaces. Adding a space is one line here plus its own module.

use std::marker::PhantomData;
use std::sync::Arc;

use crate::space::{Job, Registered, Space, SpaceError};

static SPACES: &[&dyn Space] = &[
    &Registered::<crate::star::Star>(PhantomData),
    &Registered::<crate::billiard::Billiard>(PhantomData),
    &Registered::<crate::brainball::Brainball>(PhantomData),
    &Registered::<crate::buzzled::Buzzled>(PhantomData),
    &Registered::<crate::peg::Peg>(PhantomData),
];

/// Every registered space, in the order `sweep --help` lists them.
pub fn spaces() -> &'static [&'static dyn Space] {
    SPACES
}

/// The space called `name`, or an error that lists the known ones.
pub fn lookup(name: &str) -> Result<&'static dyn Space, SpaceError> {
    spaces()
        .iter()
        .copied()
        .find(|s| s.name() == name)
        .ok_or_else(|| SpaceError::UnknownSpace {
            name: name.to_string(),
            known: spaces()
                .iter()
                .map(|s| s.name())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// Rebuilds a job from the space name and canonical parameters that travel with it.
pub fn job_from_params(
    space: &str,
    params: &serde_json::Value,
) -> Result<Arc<dyn Job>, SpaceError> {
    lookup(space)?.parse_params(params)
}
