pub mod embed;
pub mod inspect;
