// Package archiveloc resolves Parquet archive locations: the URLs users
// give the CLI and the backfill workflow ("file:///var/tflo/archive",
// "s3://bucket/prefix") into a parquet.Archive.
//
// Main types: [Location] (a parsed URL; Parse checks it, so a command can
// refuse a bad location before it starts anything) and [S3] (how to reach
// S3 for s3:// locations: endpoint, region and the names of the
// environment variables holding the keys; without them the AWS standard
// chain applies). [Open] opens one location; [Resolver] opens locations on
// demand and keeps them, for a worker serving many backfills.
//
// Concurrency: Parse and Open are safe for concurrent use; a Resolver's
// function may be called from any goroutine.
package archiveloc
