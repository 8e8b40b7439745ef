pub mod embed;
pub mod init;
pub mod inspect;
pub mod predict;
pub mod report;
