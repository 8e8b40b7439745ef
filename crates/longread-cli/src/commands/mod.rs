pub mod embed;
pub mod eval;
pub mod init;
pub mod inspect;
pub mod predict;
pub mod report;
pub mod tokenizer;
pub mod train;
