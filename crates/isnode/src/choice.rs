//! Flags whose value is one of a library's named choices (the serve configuration's engine,
//! block reads, ...; a token's role): the parser and the help's possible values come from
//! the library's list of `(value, name, help)`, so the libraries need no clap.

use std::ffi::OsStr;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};

/// Parses a flag's value as one of `choices` (by name).
#[derive(Clone, Copy)]
pub(crate) struct ChoiceParser<T: 'static> {
    choices: &'static [(T, &'static str, &'static str)],
}

impl<T: Copy + Send + Sync + 'static> ChoiceParser<T> {
    /// A parser of `choices`.
    pub(crate) fn new(choices: &'static [(T, &'static str, &'static str)]) -> Self {
        ChoiceParser { choices }
    }

    fn possible(&self) -> impl Iterator<Item = PossibleValue> + '_ {
        self.choices
            .iter()
            .map(|(_, name, help)| PossibleValue::new(*name).help(*help))
    }
}

impl<T: Copy + Send + Sync + 'static> TypedValueParser for ChoiceParser<T> {
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<T, clap::Error> {
        let name = PossibleValuesParser::new(self.possible()).parse_ref(cmd, arg, value)?;
        self.choices
            .iter()
            .find(|(_, n, _)| *n == name)
            .map(|(v, _, _)| *v)
            .ok_or_else(|| clap::Error::new(clap::error::ErrorKind::InvalidValue).with_cmd(cmd))
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(self.possible()))
    }
}
