// Build the prebuilt (federated) JupyterLab extension into ../mwnotebook/server/labextension
// with @jupyterlab/builder. The core's shared packages come from the installed jupyterlab's
// staging/package.json (jupyterlab is a build requirement: pyproject.toml [build-system]).
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';

const python = process.env.PYTHON || 'python3';
const core = execFileSync(python, ['-c', 'import jupyterlab, os; print(os.path.join(os.path.dirname(jupyterlab.__file__), "staging"))'])
  .toString().trim();
const require = createRequire(import.meta.url);
const builder = require.resolve('@jupyterlab/builder/lib/build-labextension.js');
execFileSync(process.execPath, [builder, '--core-path', core, '.'], { stdio: 'inherit' });
