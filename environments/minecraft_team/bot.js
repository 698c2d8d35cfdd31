// One agent's body: a mineflayer bot driven over JSON lines on stdin/stdout (logs on stderr).
//
//   node bot.js --host 127.0.0.1 --port GAME_PORT --username NAME
//
// Once its modules are loaded it prints {"event": "loaded"} and waits for {"op": "connect"} on
// stdin (so that bots can load at once but log in one at a time); after it spawns it prints
// {"event": "spawned", ...}. Then each stdin line is a request
// {"id": N, "op": ..., ...} answered by one stdout line {"id": N, "ok": true, ...} or
// {"id": N, "ok": false, "error": "..."}. Operations:
//
//   look                       position, other players (by UUID), chat heard since last look
//   goto {x, y, z}             walk next to (x, y, z) with mineflayer-pathfinder
//   dig {x, y, z}              break the block there
//   place {x, y, z, block}     place a block from the inventory at (x, y, z), on the block below
//   say {text}                 chat
//   inventory                  items and counts
//   quit

const readline = require('readline')
const mineflayer = require('mineflayer')
const { pathfinder, Movements, goals } = require('mineflayer-pathfinder')
const { Vec3 } = require('vec3')

// Everything mineflayer or its parser prints must stay off stdout (the JSON channel).
const out = process.stdout.write.bind(process.stdout)
console.log = (...args) => console.error(...args)
console.info = (...args) => console.error(...args)
console.warn = (...args) => console.error(...args)
function send (message) { out(JSON.stringify(message) + '\n') }

function argument (name, fallback) {
  const index = process.argv.indexOf(`--${name}`)
  return index >= 0 ? process.argv[index + 1] : fallback
}

let bot = null
const heard = []

function connect () {
  bot = mineflayer.createBot({
    host: argument('host', '127.0.0.1'),
    port: parseInt(argument('port', '25565'), 10),
    username: argument('username', 'agent0'),
    auth: 'offline',
    version: '1.21.4',
    hideErrors: true
  })
  bot.loadPlugin(pathfinder)
  bot.on('chat', (username, message) => {
    if (username !== bot.username) heard.push({ from: username, text: message })
  })
  bot.on('kicked', (reason) => { send({ event: 'kicked', reason: String(reason) }); process.exit(3) })
  bot.on('error', (error) => console.error('bot error:', error.message))
  bot.on('end', () => { send({ event: 'end' }); process.exit(0) })
  bot.once('spawn', () => {
    send({ event: 'spawned', username: bot.username, position: round(bot.entity.position) })
  })
}

function round (v) { return [Math.round(v.x * 10) / 10, Math.round(v.y * 10) / 10, Math.round(v.z * 10) / 10] }
function at (request) { return new Vec3(Math.floor(request.x), Math.floor(request.y), Math.floor(request.z)) }

function withTimeout (promise, ms, what) {
  return Promise.race([
    promise,
    new Promise((resolve, reject) => setTimeout(() => reject(new Error(`${what} timed out after ${ms} ms`)), ms))
  ])
}

const operations = {
  async look () {
    const players = Object.values(bot.players)
      .filter((p) => p.username !== bot.username)
      .map((p) => ({ username: p.username, uuid: p.uuid, position: p.entity ? round(p.entity.position) : null, seen_as: p.entity ? p.entity.name : null }))
    const messages = heard.splice(0, heard.length)
    return { position: round(bot.entity.position), players, heard: messages }
  },
  async goto (request) {
    const target = at(request)
    const movements = new Movements(bot)
    movements.canDig = false
    bot.pathfinder.setMovements(movements)
    try {
      await withTimeout(bot.pathfinder.goto(new goals.GoalNear(target.x, target.y, target.z, 1)), 15000, 'goto')
    } finally {
      bot.pathfinder.stop()
    }
    return { position: round(bot.entity.position) }
  },
  async dig (request) {
    const block = bot.blockAt(at(request))
    if (!block || block.name === 'air') throw new Error(`there is no block at ${request.x} ${request.y} ${request.z}`)
    if (bot.entity.position.distanceTo(block.position) > 4.5) throw new Error(`block at ${request.x} ${request.y} ${request.z} is out of reach`)
    const name = block.name
    await withTimeout(bot.dig(block, true), 3000, 'dig').catch((error) => {
      // dig waits for the server's block update, which flying-squid may not echo.
      const now = bot.blockAt(block.position)
      if (now && now.name !== 'air') throw error
    })
    return { dug: name }
  },
  async place (request) {
    const target = at(request)
    const item = bot.inventory.items().find((i) => i.name === request.block)
    if (!item) throw new Error(`no ${request.block} in the inventory`)
    const below = bot.blockAt(target.offset(0, -1, 0))
    if (!below || below.name === 'air') throw new Error(`nothing to place on under ${target.x} ${target.y} ${target.z}`)
    const there = bot.blockAt(target)
    if (there && there.name !== 'air') throw new Error(`${there.name} is already at ${target.x} ${target.y} ${target.z}`)
    if (bot.entity.position.distanceTo(target) > 4.5) throw new Error(`${target.x} ${target.y} ${target.z} is out of reach`)
    await bot.equip(item, 'hand')
    await withTimeout(bot.placeBlock(below, new Vec3(0, 1, 0)), 3000, 'place').catch((error) => {
      // placeBlock waits for the server's block update, which flying-squid may not echo.
      const now = bot.blockAt(target)
      if (!now || now.name === 'air') throw error
    })
    return { placed: request.block }
  },
  async say (request) {
    bot.chat(String(request.text).slice(0, 200))
    return {}
  },
  async inventory () {
    return { items: bot.inventory.items().map((i) => ({ name: i.name, count: i.count })) }
  },
  async quit () {
    setTimeout(() => bot.quit(), 10)
    return {}
  }
}

const lines = readline.createInterface({ input: process.stdin })
let queue = Promise.resolve()
lines.on('line', (line) => {
  if (!line.trim()) return
  let request
  try { request = JSON.parse(line) } catch (error) { send({ ok: false, error: `bad JSON: ${error.message}` }); return }
  if (request.op === 'connect') { if (!bot) connect(); return }
  // One operation at a time, in order.
  queue = queue.then(async () => {
    const operation = operations[request.op]
    if (!operation) { send({ id: request.id, ok: false, error: `unknown op ${JSON.stringify(request.op)}` }); return }
    if (!bot || !bot.entity) { send({ id: request.id, ok: false, error: 'not spawned yet' }); return }
    try {
      send({ id: request.id, ok: true, ...(await operation(request)) })
    } catch (error) {
      send({ id: request.id, ok: false, error: String(error.message || error) })
    }
  })
})
lines.on('close', () => { if (bot) bot.quit(); setTimeout(() => process.exit(0), 500) })
send({ event: 'loaded' })
