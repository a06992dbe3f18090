"""One-off studies: each module measures one question, names the docs/ table (under docs/evidence/) it
produces and the command that reproduces it. Nothing shipped imports a study; a study may import any other training
package and the other studies. Speed and accuracy benchmarks live in benchmarks/, the benchmark-side studies in
benchmarks/studies/."""
